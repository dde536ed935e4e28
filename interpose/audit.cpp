// libfanstore_audit.so: shared libraries from the image, through glibc's rtld-audit interface (LD_AUDIT).
// The dynamic loader opens and maps libraries with its own system calls, which no LD_PRELOAD wrapper sees, so a
// dlopen or DT_NEEDED of a library under the mount would fail. The loader asks la_objsearch about every name and
// path it is about to try; for one under the mount this answers with a kernel-visible copy of the image's file,
// made once per node in a mirror directory and shared by every process there. It runs in the loader's audit
// namespace (its own libc), before the program's constructors: it reads the image itself, with no threads.
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fanstore/client.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/node_cache.hpp"
#include "fanstore/path.hpp"
#include "mirror.hpp"
#include "remote_fetcher.hpp"

namespace fanstore::interpose::audit {
namespace {

struct State {
  std::string mount;                      // FANSTORE_MOUNT, e.g. "/fanstore"
  std::string mirror;                     // where the copies live; a path under it maps back into the image
  std::unique_ptr<Client> client;         // resolves links; no reads through it (they would start threads)
  std::shared_ptr<RemoteFetcher> remote;  // --daemon: partitions that are not on this node
  pid_t pid = 0;                          // the process that connected: a forked child reconnects
  bool broken = false;
};

State* g_state = nullptr;  // made on the first name under the mount; never freed (the loader may call us at exit)

// FANSTORE_MOUNT, read once: most names the loader asks about are not under it, and need no image.
const std::string& MountPrefix() {
  static const std::string* m = [] {
    const char* v = std::getenv(env::kMount);
    return new std::string(NormalizeAbsolute(v && *v ? v : "/fanstore"));
  }();
  return *m;
}

void Say(const std::string& line) {
  std::string l = "fanstore: " + line + "\n";
  ssize_t n = ::write(2, l.data(), l.size());
  (void)n;
}

State* Init() {
  if (g_state != nullptr) {
    if (g_state->remote && g_state->pid != ::getpid()) {  // forked: the parent's daemon connection is not ours
      g_state->remote->AfterForkChild();
      g_state->pid = ::getpid();
    }
    return g_state;
  }
  auto* s = new State;
  g_state = s;
  s->mount = MountPrefix();
  s->pid = ::getpid();
  ClientOptions o;
  o.mount = s->mount;
  o.cache_bytes = 0;
  o.index_trust = std::getenv(env::kIndexTrust) ? std::getenv(env::kIndexTrust) : "";
  if (const char* daemon = std::getenv(env::kDaemon); daemon && *daemon) {
    DaemonInfo info;
    auto f = ConnectDaemonFetcher(daemon, &info);
    if (!f.ok()) {
      Say("shared libraries in the image cannot be loaded: " + f.status().ToString());
      s->broken = true;
      return s;
    }
    o.image = info.index_dir;
    o.partition_dir = info.partition_dir;
    s->remote = std::move(f).value();
    o.remote = s->remote;
  } else if (const char* image = std::getenv(env::kImage); image && *image) {
    o.image = image;
    // The run's copy of the index, which FANSTORE_INDEX_TRUST names (the node cache itself is not attached here).
    if (const char* node = std::getenv(env::kNodeCacheDir); node && *node) o.index_file = IndexCopyIn(node, image);
  } else {
    s->broken = true;
    return s;
  }
  auto c = Client::Create(o);
  if (!c.ok()) {  // the interposer says the same in its own words; the loader then reports the library missing
    s->broken = true;
    return s;
  }
  s->client = std::move(c).value();
  std::string why;
  s->mirror = mirror::Root(s->client->image(), &why);
  if (s->mirror.empty()) {
    Say("cannot make loadable copies of the image's shared libraries: " + why);
    s->broken = true;
  }
  return s;
}

bool Under(std::string_view path, std::string_view dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

// Writes file `e` into `fd` chunk by chunk (one chunk in memory), each verified as every read path does, from the
// local partition or through the daemon.
Status WriteFile(State* s, const Entry& e, int fd) {
  const Image& img = s->client->image();
  if (Status c = img.CheckLayout(e); !c.ok()) return c;
  const bool local = img.HasPartition(e.part);
  std::unique_ptr<char[]> buf(new (std::nothrow) char[img.ChunkSize()]);
  if (!buf) return Status(Code::kNoMemory, "no memory for a chunk");
  for (uint64_t i = 0; i < img.ChunkCount(e); ++i) {
    auto c = img.GetChunk(e, i);
    if (!c.ok()) return c.status();
    Status r;
    if (local || c->codec == Codec::kZero) {  // a zero chunk needs no partition
      r = img.ReadChunk(e, *c, buf.get());
    } else if (s->remote) {
      r = s->remote->WithStored(e.part, c->offset, c->stored_size,
                                [&](const char* p, size_t n) { return DecodeChunk(e, *c, p, n, buf.get()); });
    } else {
      r = Status(Code::kIoError, "the partition of " + Printable(e.path) + " is not on this node");
    }
    for (uint64_t done = 0; r.ok() && done < c->raw_size;) {
      ssize_t w = ::pwrite(fd, buf.get() + done, c->raw_size - done, static_cast<off_t>(c->raw_offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) r = Status::FromErrno(w < 0 ? errno : ENOSPC, "cannot write a copy of " + Printable(e.path));
      else done += static_cast<uint64_t>(w);
    }
    if (!r.ok()) return r;
  }
  return Status::Ok();
}

// Keeps the strings handed to the loader alive (it may hold on to them).
const char* Keep(std::string s) { return (new std::string(std::move(s)))->c_str(); }

// The answer for one name or path: unchanged when it is not the image's, a copy's path when it is a file of the
// image, the real path when the image's symlinks lead out of it, null (skip this candidate) when no copy can be made.
// Where mirror::Root puts copies, without opening the image: a program exec'd from a copy asks about paths under it
// (its $ORIGIN) before anything else.
const std::string& MirrorPrefix() {
  static const std::string* m = new std::string(mirror::Base());
  return *m;
}

// The answer for a path of the image whose links are followed (`t`): the real path when they lead out of the image,
// a copy's path for a regular file (null when none can be made), else `name` (left to the loader).
const char* Answer(State* s, const Client::Target& t, const char* name) {
  if (!t.outside.empty()) return Keep(t.outside);
  const Entry e = s->client->image().Get(t.id);
  if (!e.is_reg()) return name;
  std::string dst;
  Status m = mirror::Install(
      s->mirror, e, [&](int fd) { return WriteFile(s, e, fd); }, &dst);
  if (!m.ok()) {
    Say("cannot make a loadable copy of " + s->mount + "/" + Printable(e.path) + ": " + m.ToString());
    return nullptr;
  }
  return Keep(std::move(dst));
}

// For a path whose links loop in the image (`rel`): the same path in the mirror as a symlink to itself, which the
// loader fails to open with ELOOP, as on the plain tree. `name` (the loader then says ENOENT) when none can be made.
const char* LoopAnswer(State* s, const std::string& rel, const char* name) {
  const std::string path = s->mirror + "/" + rel;
  const size_t slash = path.rfind('/');
  if (!mirror::MakeDirs(path.substr(0, slash)).ok()) return name;
  if (::symlink(path.c_str() + slash + 1, path.c_str()) != 0 && errno != EEXIST) return name;
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) ? Keep(path) : name;
}

const char* Search(const char* name) {
  std::string_view n(name);
  if (g_state == nullptr && !Under(n, MountPrefix()) && !Under(n, MirrorPrefix())) return name;  // the common case
  State* s = Init();
  if (s->broken) return name;
  // A path under the mirror is a path under the mount: $ORIGIN of a library loaded from a copy is the mirror.
  std::string path(n);
  if (std::string m; mirror::ToMount(n, s->mirror, s->mount, &m)) path = std::move(m);
  Classified c = ClassifyPath(path, s->mount, "/");
  if (c.cls != PathClass::kOurs) return path == n ? name : Keep(NormalizeAbsolute(path));
  std::string missing;
  auto t = s->client->Resolve(c.rel, true, &missing);
  if (!t.ok() && t.status().code() == Code::kLoop) return LoopAnswer(s, c.rel, name);
  if (!t.ok()) {
    // Not in the image: the loader's open fails and it tries the next directory. Where that directory exists in
    // the image, hand it the mirror's (created) instead, so the loader's check that the directory exists holds.
    if (size_t slash = missing.rfind('/'); slash != std::string::npos) {
      auto dir = s->client->Resolve(std::string_view(missing).substr(0, slash));
      if (dir.ok() && dir->outside.empty() && s->client->image().Get(dir->id).is_dir() &&
          mirror::MakeDirs(s->mirror + "/" + missing.substr(0, slash)).ok())
        return Keep(s->mirror + "/" + missing);
    }
    return name;
  }
  return Answer(s, *t, name);
}

// The interposer's virtual cwd (a directory of the image the program entered with chdir, which leaves the kernel's
// cwd alone): FANSTORE_CWD of the environment block the process started with, which this namespace reads and the
// interposer keeps current (cwd.cpp, ShowToLoader) when the process started with one. Empty: none.
std::string VirtualCwd() {
  const char* v = std::getenv(env::kCwd);
  if (v == nullptr || *v != '/') return {};
  std::string cwd = NormalizeAbsolute(v);
  return ClassifyPath(cwd, MountPrefix(), "/").cls == PathClass::kOurs ? cwd : std::string();  // as cwd::Init
}

// A relative path with a '/' (dlopen("./lib/libfoo.so"), an LD_LIBRARY_PATH entry "lib") is opened by the loader
// against the kernel's cwd; with a virtual cwd the program means the image's: answer for that path.
// Only a file the image has is answered for; anything else is the loader's, as before.
const char* SearchRelative(const char* name) {
  const std::string cwd = VirtualCwd();
  if (cwd.empty()) return name;
  State* s = Init();
  if (s->broken) return name;
  Classified c = ClassifyPath(name, s->mount, cwd);
  if (c.cls != PathClass::kOurs) return name;
  auto t = s->client->Resolve(c.rel);
  if (!t.ok() || !t->outside.empty()) return name;
  return Answer(s, *t, name);  // (a copy for a regular file; anything else stays the loader's)
}

// Whether a search path holds a relative entry ("lib", not "/lib").
bool HasRelativeEntry(std::string_view list) {
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find_first_of(":;", at), list.size());
    if (end > at && list[at] != '/') return true;
    at = end + 1;
  }
  return false;
}

// A bare name (no '/') is searched by the loader in LD_LIBRARY_PATH among other places. It gives up on a directory
// for good once a name was not there and the directory itself fails stat (which a directory of the image does):
// so a bare name found in an LD_LIBRARY_PATH directory of the image is answered at once, unless an earlier real
// directory of LD_LIBRARY_PATH has it.
const char* SearchLibraryPath(const char* name) {
  const char* llp = std::getenv("LD_LIBRARY_PATH");
  if (llp == nullptr) return name;
  const bool ours = std::strstr(llp, MountPrefix().c_str()) != nullptr;
  const std::string cwd = HasRelativeEntry(llp) ? VirtualCwd() : std::string();  // the base of relative entries
  if (!ours && cwd.empty()) return name;
  State* s = Init();
  if (s->broken) return name;
  std::string_view rest(llp);
  while (!rest.empty()) {
    size_t end = rest.find_first_of(":;");
    std::string dir(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (dir.empty()) continue;
    std::string cand = dir + "/" + name;
    Classified c = ClassifyPath(cand, s->mount, cwd.empty() ? "/" : cwd);
    if (c.cls != PathClass::kOurs) {
      if (::access(cand.c_str(), F_OK) == 0) return name;  // a real directory earlier in the list has it
      continue;
    }
    auto t = s->client->Resolve(c.rel);
    if (t.ok()) return Answer(s, *t, name);
  }
  return name;
}

}  // namespace
}  // namespace fanstore::interpose::audit

extern "C" {

__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

__attribute__((visibility("default"))) char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
  (void)cookie;
  if (name == nullptr) return nullptr;
  try {
    if (flag == LA_SER_ORIG && std::strchr(name, '/') == nullptr)
      return const_cast<char*>(fanstore::interpose::audit::SearchLibraryPath(name));
    if (name[0] != '/') return const_cast<char*>(fanstore::interpose::audit::SearchRelative(name));
    return const_cast<char*>(fanstore::interpose::audit::Search(name));
  } catch (...) {  // no memory: nothing may unwind into the loader
    return const_cast<char*>(name);
  }
}

}  // extern "C"
