// "Is this path ours?": pure, allocation-light path classification, unit-tested without an image.
#pragma once

#include <string>
#include <string_view>

namespace fanstore {

enum class PathClass {
  kNotOurs,  // hand to the real libc call untouched
  kOurs,     // served from the image; `rel` holds the normalised image-relative path ("" = image root)
  kTooLong,  // would exceed PATH_MAX once resolved -> ENAMETOOLONG
};

struct Classified {
  PathClass cls = PathClass::kNotOurs;
  std::string rel;  // for kOurs: no leading or trailing '/', no '.', '..' resolved, no '//'
};

// Lexically normalises an absolute path: collapses '//', drops '.', resolves '..' (never above '/'),
// drops a trailing '/'. "/" stays "/". Does not touch the file system.
std::string NormalizeAbsolute(std::string_view path);

// Classifies `path` for a mount at `mount` (absolute, normalised, e.g. "/fanstore").
//  - absolute paths are normalised and matched component-wise ("/fanstorex" is not ours);
//  - relative paths are resolved against `cwd` (the process's cwd, real or virtual) first;
//  - `cwd` must be absolute and normalised.
// A path that climbs out of the mount with '..' is not ours.
Classified ClassifyPath(std::string_view path, std::string_view mount, std::string_view cwd);

// Joins an image-relative directory and a name: ("a/b", "c") -> "a/b/c", ("", "c") -> "c".
std::string JoinRel(std::string_view dir, std::string_view name);

}  // namespace fanstore
