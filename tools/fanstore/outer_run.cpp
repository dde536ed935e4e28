// The enclosing `fanstore run` (see outer_run.hpp).
#include "outer_run.hpp"

#include <cstdlib>
#include <cstring>

#include "fanstore/env.hpp"
#include "fanstore/path.hpp"

namespace fanstore::cli {

OuterRun FindOuterRun() {
  OuterRun o;
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strstr(preload, "libfanstore_preload") == nullptr) return o;
  if (const char* d = std::getenv(env::kDaemon); d && *d) o.daemon = d;
  else if (const char* i = std::getenv(env::kImage); i && *i) o.image = i;
  const char* m = std::getenv(env::kMount);
  o.mount = NormalizeAbsolute(m && *m == '/' ? m : env::kDefaultMount);
  return o;
}

bool UnderOuterMount(const OuterRun& outer, const std::string& path) {
  if (!outer.present() || path.empty()) return false;
  std::string abs = path;
  if (abs[0] != '/') {
    // The program that started us may be in a directory of the image (the interposer's virtual cwd, handed down as
    // FANSTORE_CWD); our own kernel cwd is not that.
    const char* cwd = std::getenv(env::kCwd);
    if (cwd == nullptr || *cwd != '/') return false;
    abs = std::string(cwd) + "/" + abs;
  }
  return ClassifyPath(NormalizeAbsolute(abs), outer.mount, "/").cls == PathClass::kOurs;
}

}  // namespace fanstore::cli
