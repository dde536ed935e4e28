// Client::Resolve: follows the symlinks of an image path as the kernel's path walk does.
#include <limits.h>

#include "fanstore/client.hpp"
#include "fanstore/path.hpp"

namespace fanstore {
namespace {

constexpr int kMaxLinks = 40;  // the kernel's MAXSYMLINKS
constexpr uint32_t kEmptyId = 0xFFFFFFFFu;

std::string_view DirOf(std::string_view rel) {
  size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
}

}  // namespace

Result<Client::Target> Client::Resolve(std::string_view rel_in, bool follow_last, std::string* missing,
                                       LinkCheck may_follow, void* ctx) {
  const Image& img = *image_;
  std::string rel(rel_in);
  for (int links = 0;;) {
    // The common case, a path without links: one hash probe.
    uint32_t link = kEmptyId;
    std::string rest;  // what follows the link in the path
    auto r = img.Lookup(rel);
    if (r.ok()) {
      if (!follow_last || !img.Get(*r).is_link()) return Target{*r, {}};
      link = *r;
    } else {
      // A miss: the deepest prefix that exists decides. A symlink is followed with the rest appended; a file
      // makes the path ENOTDIR; a directory means the next component is missing (ENAMETOOLONG if it is longer
      // than NAME_MAX, as a kernel file system says).
      size_t next = 0;  // where the first component past the deepest existing prefix starts
      for (size_t cut = rel.rfind('/'); cut != std::string::npos && cut > 0; cut = rel.rfind('/', cut - 1)) {
        auto p = img.Lookup(std::string_view(rel).substr(0, cut));
        if (!p.ok()) continue;
        next = cut + 1;
        if (img.Get(*p).is_link()) {
          link = *p;
          rest = rel.substr(cut + 1);
        }
        break;
      }
      if (link == kEmptyId) {
        stats_.lookups_missing.fetch_add(1, std::memory_order_relaxed);
        const size_t end = rel.find('/', next);
        if (r.status().code() == Code::kNotFound && (end == std::string::npos ? rel.size() : end) - next > NAME_MAX)
          return Status(Code::kNameTooLong, "file name longer than NAME_MAX in the image: " + Printable(rel_in));
        if (missing != nullptr) *missing = std::move(rel);
        if (links > 0 && r.status().code() == Code::kNotFound)  // name the path asked for, not only where it led
          return Status(Code::kNotFound, r.status().message() + " (through symlinks from " + Printable(rel_in) + ")");
        return r.status();
      }
    }
    if (may_follow != nullptr && !may_follow(ctx, link))
      return Status(Code::kPermission, "no search permission on the way to a symlink: " + Printable(rel_in));
    if (++links > kMaxLinks)
      return Status(Code::kLoop, "a symlink loop in the image (over " + std::to_string(kMaxLinks) +
                                     " links followed): " + Printable(rel_in));
    const Entry e = img.Get(link);
    auto target = img.LinkTarget(e);
    if (!target.ok()) return target.status();
    std::string base = opts_.mount;
    if (std::string_view dir = DirOf(e.path); !dir.empty()) (base += '/') += dir;
    Classified c = ClassifyPath(*target, opts_.mount, base);
    if (c.cls == PathClass::kTooLong)
      return Status(Code::kNameTooLong, "path longer than PATH_MAX through symlinks: " + Printable(rel_in));
    if (c.cls == PathClass::kNotOurs) {
      Target t;
      t.outside = NormalizeAbsolute((*target)[0] == '/' ? std::string(*target) : base + "/" + std::string(*target));
      if (!rest.empty()) (t.outside += t.outside == "/" ? "" : "/") += rest;
      if (t.outside.size() >= PATH_MAX)
        return Status(Code::kNameTooLong, "path longer than PATH_MAX through symlinks: " + Printable(rel_in));
      return t;
    }
    rel = rest.empty() ? std::move(c.rel) : JoinRel(c.rel, rest);
    if (opts_.mount.size() + 1 + rel.size() >= PATH_MAX)
      return Status(Code::kNameTooLong, "path longer than PATH_MAX through symlinks: " + Printable(rel_in));
  }
}

}  // namespace fanstore
