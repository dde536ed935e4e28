// Kernel-visible copies of the image's files, for the loader and the kernel's exec: they need a real path (the
// loader derives $ORIGIN from it, the kernel /proc/self/exe). One copy per file per node, shared by its processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore::interpose::mirror {

// Where Root puts the copies of any image, found without opening one: every Root is at or below it.
std::string Base();

// The directory the copies of `img` live in: under the node chunk cache `fanstore run` set up (tmpfs, shared by
// the node's processes) when it belongs to this process's effective user, else TMPDIR/fanstore-libs-EUID/<content
// key>, a directory that must be that user's alone (a job that switched users after `fanstore run` gets its own).
// Empty, with *error set, when there is none.
std::string Root(const Image& img, std::string* error);

// mkdir -p with mode 0700.
Status MakeDirs(const std::string& dir);

// Where Root puts the copies of `img` for this process, whether or not that directory exists or may be used.
std::string Where(const Image& img);

// A path under the mirror `mirror` is the same path under `mount` (the loader and /proc/self/exe name copies):
// *out gets it. False when `path`, its ".." resolved, is not under the mirror; allocates only when it starts so.
bool ToMount(std::string_view path, std::string_view mirror, std::string_view mount, std::string* out);

// Makes `root`/`e.path` hold file `e` unless a complete copy is already there: `write(fd)` fills a temporary file,
// which is renamed into place, so no process ever maps or executes a partial copy.
Status Install(const std::string& root, const Entry& e, const std::function<Status(int fd)>& write, std::string* path);

}  // namespace fanstore::interpose::mirror
