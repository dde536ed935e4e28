// Walks the source tree for pack: keeps symlinks (or follows them), finds hard links, counts special files.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "fanstore/path.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/status.hpp"
#include "pack_tree.hpp"

namespace fanstore {
namespace {

const char* KindName(mode_t m) {
  if (S_ISSOCK(m)) return "socket";
  if (S_ISFIFO(m)) return "FIFO";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  return "special file";
}

struct Child {
  std::string name;
  struct stat st;
  std::string target;      // a symlink kept as one: its target
  bool hard_link = false;  // a regular file that may have other names: nlink > 1, or links are followed
};

// A file that may have other names in the tree, and the id of this name.
struct NameOf {
  dev_t dev;
  ino_t ino;
  uint32_t id;
  bool operator<(const NameOf& o) const { return dev != o.dev ? dev < o.dev : ino != o.ino ? ino < o.ino : id < o.id; }
};

class Walker {
 public:
  Walker(const PackOptions& opts, PackTree* tree, const std::function<void(const std::string&)>& warn)
      : opts_(opts), tree_(tree), warn_(warn), stop_(opts.stop) {}

  Status Run(const std::string& source) {
    Status s = Walk(source);
    if (!s.ok()) return s;
    LinkNames();
    WarnSpecial();
    WarnIntoSource();
    return Status::Ok();
  }

 private:
  Status Walk(const std::string& source) {
    struct stat st;
    if (::stat(source.c_str(), &st) != 0) return Status::FromErrno(errno, "cannot read source " + Printable(source));
    if (!S_ISDIR(st.st_mode)) return Status(Code::kNotDirectory, "source " + Printable(source) + " is not a directory");
    // The source as an absolute path both as given and with its links resolved: the two ways a link names it.
    char buf[PATH_MAX];
    if (::realpath(source.c_str(), buf)) source_names_.emplace_back(buf);
    if (source[0] == '/') source_names_.push_back(NormalizeAbsolute(source));
    else if (::getcwd(buf, sizeof buf)) source_names_.push_back(NormalizeAbsolute(std::string(buf) + "/" + source));
    tree_->nodes.push_back(MakeNode(st, kRootId, "", 0));
    tree_->dirs = 1;
    return WalkDir(source, kRootId, st);
  }

 private:
  PackNode MakeNode(const struct stat& st, uint32_t parent, std::string_view rel, uint32_t name_off) {
    PackNode n;
    n.path_off = tree_->paths.size();
    n.path_len = static_cast<uint32_t>(rel.size());
    n.name_off = name_off;
    tree_->paths.append(rel);
    n.parent = parent;
    n.mode = static_cast<uint32_t>(st.st_mode & (S_IFMT | 07777));
    n.size = static_cast<uint64_t>(st.st_size);
    n.blocks = static_cast<uint64_t>(st.st_blocks);
    n.uid = static_cast<uint32_t>(st.st_uid);
    n.gid = static_cast<uint32_t>(st.st_gid);
    n.mtime_sec = st.st_mtim.tv_sec;
    n.mtime_nsec = static_cast<uint32_t>(st.st_mtim.tv_nsec);
    n.nlink = S_ISDIR(st.st_mode) ? 2 : 1;
    return n;
  }

  void Warn(const std::string& line) {
    ++tree_->skipped;
    if (warn_) warn_(line);
  }

  // One line for all the special files skipped: a tree of sockets would otherwise flood the terminal.
  void WarnSpecial() {
    uint64_t total = 0;
    std::string kinds;
    for (const auto& [kind, n] : special_) {
      total += n;
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + kind + (n > 1 ? "s" : "");
    }
    if (total == 0) return;
    tree_->skipped += total;
    if (warn_)
      warn_("skipped " + std::to_string(total) + " special file" + (total > 1 ? "s" : "") + " (" + kinds + "), e.g. " +
            Printable(first_special_) + ": an image holds files, directories and symlinks (--strict refuses them)");
  }

  // A special file: counted, or the pack's end with --strict.
  Status Special(const struct stat& st, const std::string& rel) {
    if (opts_.strict)
      return Status(Code::kInvalidArgument, "source " + Printable(opts_.source + "/" + rel) + " is a " +
                                                KindName(st.st_mode) +
                                                ": an image holds files, directories and symlinks; remove it or "
                                                "pack without --strict to skip it");
    if (special_.empty()) first_special_ = rel;
    ++special_[KindName(st.st_mode)];
    return Status::Ok();
  }

  // The names of one file (same dev, ino) become one inode: the first name in walk order holds the bytes, the others
  // are its aliases, and every name reports how many there are. (A sorted array: with --follow-symlinks every file
  // of a tree of millions is a candidate, where a hash map would cost twice the memory.)
  void LinkNames() {
    std::sort(names_.begin(), names_.end());
    for (size_t i = 0, j; i < names_.size(); i = j) {
      for (j = i + 1; j < names_.size() && names_[j].dev == names_[i].dev && names_[j].ino == names_[i].ino; ++j)
        tree_->nodes[names_[j].id].link_of = names_[i].id;
      for (size_t k = i; k < j; ++k) tree_->nodes[names_[k].id].nlink = static_cast<uint32_t>(j - i);
    }
    names_.clear();
    names_.shrink_to_fit();
  }

  // A symlink kept with an absolute target inside the source still names the source after packing: under the mount
  // it reads the source tree rather than the image (or fails where that is absent). Counted for one warning.
  void NoteTarget(const std::string& rel, const std::string& target) {
    if (target.empty() || target[0] != '/') return;
    for (const std::string& src : source_names_) {
      // At or under the source, as the interposer tells a path under its prefix (normalised: "/a/../src/x" too).
      if (ClassifyPath(target, src, "/").cls != PathClass::kNotOurs) {
        if (into_source_++ == 0) first_into_source_ = Printable(rel) + " -> " + Printable(target);
        return;
      }
    }
  }

  void WarnIntoSource() {
    if (into_source_ == 0 || !warn_) return;
    warn_(std::to_string(into_source_) + " symlink" + (into_source_ > 1 ? "s name" : " names") +
          " a path in the source by its absolute path (e.g. " + first_into_source_ +
          "), kept as is: under the mount it reads the source tree, not the image; make such links relative, or "
          "pack with --follow-symlinks to store what they point at");
  }

  // The target of symlink `name` in directory `dfd`, verbatim.
  Status ReadTarget(int dfd, const std::string& name, const std::string& abs, std::string* out) {
    char buf[PATH_MAX];
    ssize_t n = ::readlinkat(dfd, name.c_str(), buf, sizeof buf);
    if (n < 0) return Status::FromErrno(errno, "cannot read symlink " + Printable(abs + "/" + name));
    if (n == 0 || static_cast<size_t>(n) > format::kMaxLinkTarget)
      return Status(Code::kNameTooLong, "symlink " + Printable(abs + "/" + name) + " has a target of " +
                                            std::to_string(n) + " bytes; symlinks hold 1 to " +
                                            std::to_string(format::kMaxLinkTarget));
    out->assign(buf, static_cast<size_t>(n));
    return Status::Ok();
  }

  // Reads and stats every entry of `abs` (rel path `rel`), sorted bytewise by name, skipping what pack
  // cannot store. The directory is closed before recursing so deep trees do not pile up open fds.
  Status ReadChildren(const std::string& abs, const std::string& rel, std::vector<Child>* out) {
    DIR* d = ::opendir(abs.c_str());
    if (d == nullptr) return Status::FromErrno(errno, "cannot read directory " + Printable(abs));
    int dfd = ::dirfd(d);
    Status s;
    for (;;) {
      errno = 0;
      dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) s = Status::FromErrno(errno, "cannot read directory " + Printable(abs));
        break;
      }
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string child_rel = rel.empty() ? name : rel + "/" + name;
      Child c;
      c.name = std::move(name);
      struct stat lst;
      if (::fstatat(dfd, c.name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed while we walk: it is simply not in the image
        s = Status::FromErrno(errno, "cannot stat " + Printable(abs + "/" + c.name));
        break;
      }
      if (S_ISLNK(lst.st_mode) && !opts_.follow_symlinks) {
        c.st = lst;
        s = ReadTarget(dfd, c.name, abs, &c.target);
        if (!s.ok()) {
          if (s.code() == Code::kNotFound) {  // removed while we walk
            s = Status::Ok();
            continue;
          }
          break;
        }
        c.st.st_size = static_cast<off_t>(c.target.size());
      } else if (S_ISLNK(lst.st_mode)) {
        if (::fstatat(dfd, c.name.c_str(), &c.st, 0) != 0) {
          // A loop (a -> b -> a, or a chain longer than the kernel follows) is not a dangling link: say which.
          const int err = errno;
          if (err == ENOENT || err == ENOTDIR) Warn("skipping dangling symlink " + Printable(child_rel));
          else if (err == ELOOP)
            Warn("skipping symlink loop " + Printable(child_rel) + " (too many levels of symlinks)");
          else Warn("skipping symlink " + Printable(child_rel) + ": " + std::strerror(err));
          continue;
        }
      } else {
        c.st = lst;
      }
      if (!S_ISREG(c.st.st_mode) && !S_ISDIR(c.st.st_mode) && !S_ISLNK(c.st.st_mode)) {
        s = Special(c.st, child_rel);
        if (!s.ok()) break;
        continue;
      }
      // Followed links (to a file, or to a directory holding files) reach one file by several names, whatever its
      // link count: every regular file is looked up by (dev, ino) then, and stored once.
      c.hard_link = S_ISREG(c.st.st_mode) && (opts_.follow_symlinks || lst.st_nlink > 1);
      out->push_back(std::move(c));
    }
    ::closedir(d);
    if (!s.ok()) return s;
    std::sort(out->begin(), out->end(), [](const Child& a, const Child& b) { return a.name < b.name; });
    return Status::Ok();
  }

  Status WalkDir(const std::string& abs, uint32_t dir_id, const struct stat& dir_st) {
    if (Stopped(stop_)) return Interrupted();
    chain_.emplace_back(dir_st.st_dev, dir_st.st_ino);
    // Copy: the arena may grow (and move) while children are appended.
    std::string rel(tree_->Path(tree_->nodes[dir_id]));
    std::vector<Child> kids;
    Status s = ReadChildren(abs, rel, &kids);
    if (!s.ok()) return s;
    std::vector<uint32_t> ids;
    ids.reserve(kids.size());
    uint32_t subdirs = 0;
    for (const Child& c : kids) {
      std::string child_rel = rel.empty() ? c.name : rel + "/" + c.name;
      std::string child_abs = abs + "/" + c.name;
      if (child_abs.size() >= PATH_MAX)
        return Status(Code::kNameTooLong, "path longer than PATH_MAX: " + Printable(child_abs));
      bool is_dir = S_ISDIR(c.st.st_mode);
      if (is_dir && std::find(chain_.begin(), chain_.end(), std::make_pair(c.st.st_dev, c.st.st_ino)) != chain_.end()) {
        Warn("skipping " + Printable(child_rel) + ": directory loop (it leads back to one of its parents)");
        continue;
      }
      if (tree_->nodes.size() >= 0xFFFFFFFEull)
        return Status(Code::kInvalidArgument, "more than 4294967294 entries: split the dataset into several images");
      uint32_t id = static_cast<uint32_t>(tree_->nodes.size());
      uint32_t name_off = static_cast<uint32_t>(child_rel.size() - c.name.size());
      tree_->nodes.push_back(MakeNode(c.st, dir_id, child_rel, name_off));
      ids.push_back(id);
      if (is_dir) {
        ++subdirs;
        ++tree_->dirs;
        s = WalkDir(child_abs, id, c.st);
        if (!s.ok()) return s;
      } else if (S_ISLNK(c.st.st_mode)) {
        ++tree_->links;
        tree_->nodes[id].offset = tree_->targets.size();
        tree_->targets += c.target;
        NoteTarget(child_rel, c.target);
      } else {
        ++tree_->files;
        const std::string_view n = c.name;
        if (n.size() > 3 && (n.substr(n.size() - 3) == ".so" || n.find(".so.") != std::string_view::npos))
          tree_->shared_libraries = true;
        if (c.hard_link) names_.push_back(NameOf{c.st.st_dev, c.st.st_ino, id});
      }
    }
    PackNode& self = tree_->nodes[dir_id];
    self.nlink = 2 + subdirs;
    self.child_first = static_cast<uint32_t>(tree_->children.size());
    self.child_count = static_cast<uint32_t>(ids.size());
    tree_->children.insert(tree_->children.end(), ids.begin(), ids.end());
    chain_.pop_back();
    return Status::Ok();
  }

  const PackOptions& opts_;
  PackTree* tree_;
  const std::function<void(const std::string&)>& warn_;
  const std::atomic<bool>* stop_;
  std::vector<std::pair<dev_t, ino_t>> chain_;  // (dev, ino) of the directories from the root down
  std::vector<NameOf> names_;                   // files that may have other names (LinkNames)
  std::map<std::string, uint64_t> special_;     // special files skipped, by kind
  std::string first_special_;
  std::vector<std::string> source_names_;  // the source's absolute path(s): as given, and resolved
  uint64_t into_source_ = 0;               // kept symlinks with an absolute target inside the source
  std::string first_into_source_;
};

}  // namespace

Status WalkSource(const PackOptions& opts, PackTree* tree, const std::function<void(const std::string&)>& warn) {
  return Walker(opts, tree, warn).Run(opts.source);
}

}  // namespace fanstore
