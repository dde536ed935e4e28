// Lexical path classification for the mount prefix; pure functions, no file-system access.
#include "fanstore/path.hpp"

#include <climits>
#include <vector>

namespace fanstore {

std::string NormalizeAbsolute(std::string_view path) {
  // Components are views into `path`; '..' pops, '.' and empty components vanish.
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    std::string_view c = path.substr(i, j - i);
    if (c.empty() || c == ".") {
    } else if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else {
      parts.push_back(c);
    }
    i = j;
  }
  std::string out;
  out.reserve(path.size());
  for (auto c : parts) {
    out.push_back('/');
    out.append(c);
  }
  if (out.empty()) out = "/";
  return out;
}

Classified ClassifyPath(std::string_view path, std::string_view mount, std::string_view cwd) {
  Classified r;
  if (path.empty()) return r;  // the real call reports ENOENT itself
  // Fast reject: an absolute path that does not start with the mount prefix is never ours
  // (normalisation cannot make "/usr/..//fanstore" common enough to matter, but handle it anyway).
  std::string joined;
  if (path[0] == '/') {
    // Only a path with "..", "." or "//" components can normalise to something its text does not start with.
    const bool plain = path.find("/..") == std::string_view::npos && path.find("//") == std::string_view::npos &&
                       path.find("/./") == std::string_view::npos;
    if (path.size() >= mount.size() && path.compare(0, mount.size(), mount) == 0) {
      // "/fanstore", "/fanstore/..." are candidates; "/fanstorex" is not (but "/fanstorex/../fanstore/a" is).
      // A mount at "/" takes everything.
      if (mount.size() > 1 && path.size() > mount.size() && path[mount.size()] != '/' && plain) return r;
    } else if (plain) {
      return r;
    }
    joined.assign(path);
  } else {
    joined.reserve(cwd.size() + 1 + path.size());
    joined.assign(cwd);
    joined.push_back('/');
    joined.append(path);
  }
  if (joined.size() >= PATH_MAX) {
    // Only ours if it is under the mount; a long foreign path goes to libc, which will say ENAMETOOLONG.
    std::string n = NormalizeAbsolute(joined);
    if (n.size() >= mount.size() && n.compare(0, mount.size(), mount) == 0 &&
        (mount.size() == 1 || n.size() == mount.size() || n[mount.size()] == '/'))
      r.cls = PathClass::kTooLong;
    return r;
  }
  std::string n = NormalizeAbsolute(joined);
  if (n.size() < mount.size() || n.compare(0, mount.size(), mount) != 0) return r;
  if (n.size() == mount.size()) {
    r.cls = PathClass::kOurs;
    return r;
  }
  if (mount.size() == 1) {  // mount at "/" (tests only): everything is ours
    r.cls = PathClass::kOurs;
    r.rel = n.substr(1);
    return r;
  }
  if (n[mount.size()] != '/') return r;
  r.cls = PathClass::kOurs;
  r.rel = n.substr(mount.size() + 1);
  return r;
}

std::string JoinRel(std::string_view dir, std::string_view name) {
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out.assign(dir);
  if (!dir.empty()) out.push_back('/');
  out.append(name);
  return out;
}

}  // namespace fanstore
