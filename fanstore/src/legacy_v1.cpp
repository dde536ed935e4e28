// `fanstore convert`: reads an image of format version 1 (one zstd frame or raw bytes per file, no chunks) and
// writes it again as a current image. The v1 layout (the index header of 192 bytes; entries as in v2 with
// codec 0/1 and no chunk table) is described in git history of docs/format.md; only this file reads it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "decode_internal.hpp"
#include "fanstore/pack.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "hash.hpp"
#include "pack_tree.hpp"

namespace fanstore {
namespace {

using format::Load32;
using format::Load64;

// Version 1 header fields (192 bytes).
namespace v1 {
constexpr uint32_t kHeaderSize = 192;
constexpr size_t kRegularParts = 20, kReplicatedPart = 24, kPartitionCount = 28, kEntryCount = 32, kFileCount = 40,
                 kDirCount = 48, kIndexSize = 80, kEntriesOff = 88, kEntriesSize = 96, kChildrenOff = 104,
                 kChildrenSize = 112, kPartsOff = 136, kPartsSize = 144, kStringsOff = 152, kStringsSize = 160,
                 kBodyXxh3 = 168, kHeaderXxh3 = 184;
}  // namespace v1

Status Damaged(const std::string& dir, const std::string& what) {
  return Status(Code::kCorrupt,
                dir + " (format 1) is damaged (" + what + "): it cannot be converted; re-pack the source");
}

// A version-1 image, mapped and checked (checksums, sections, every entry's fields).
class V1Image {
 public:
  ~V1Image() {
    if (base_) ::munmap(const_cast<char*>(base_), len_);
    for (int fd : part_fds_)
      if (fd >= 0) ::close(fd);
  }

  Status Open(const std::string& dir) {
    dir_ = dir;
    const std::string path = dir + "/" + format::kIndexName;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO fails below, not waits)
    if (fd < 0) return Status::FromErrno(errno, "cannot open " + path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "cannot stat " + path);
    }
    if (!S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(v1::kHeaderSize)) {
      ::close(fd);
      return Damaged(dir, S_ISREG(st.st_mode) ? "index.fsi is truncated" : "index.fsi is not a regular file");
    }
    len_ = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, len_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "cannot map " + path);
    base_ = static_cast<const char*>(p);
    const char* h = base_;
    if (std::memcmp(h, format::kIndexMagic, 8) != 0) return Damaged(dir, "bad magic");
    if (Load32(h + 8) != 1) return Status(Code::kInvalidArgument, dir + " is not a format-1 image: nothing to convert");
    if (Load32(h + 12) != v1::kHeaderSize || Xxh3(h, v1::kHeaderXxh3) != Load64(h + v1::kHeaderXxh3))
      return Damaged(dir, "header checksum");
    if (Load64(h + v1::kIndexSize) != len_) return Damaged(dir, "index size");
    if (Xxh3(h + v1::kHeaderSize, len_ - v1::kHeaderSize) != Load64(h + v1::kBodyXxh3))
      return Damaged(dir, "body checksum");
    entries_ = Load64(h + v1::kEntryCount);
    const uint64_t eo = Load64(h + v1::kEntriesOff), co = Load64(h + v1::kChildrenOff),
                   cs = Load64(h + v1::kChildrenSize);
    const uint64_t po = Load64(h + v1::kPartsOff), so = Load64(h + v1::kStringsOff), ss = Load64(h + v1::kStringsSize);
    parts_ = Load32(h + v1::kPartitionCount);
    // Version 1 entries have the layout of version 2's.
    if (entries_ == 0 || entries_ >= 0xFFFFFFFFu || Load64(h + v1::kEntriesSize) != entries_ * format::kEntrySizeV2 ||
        !RangeWithin(eo, entries_ * format::kEntrySizeV2, len_) || !RangeWithin(co, cs, len_) || cs % 4 ||
        Load64(h + v1::kPartsSize) != uint64_t{parts_} * format::kPartRecordSize ||
        !RangeWithin(po, uint64_t{parts_} * format::kPartRecordSize, len_) || !RangeWithin(so, ss, len_))
      return Damaged(dir, "section layout");
    entry_table_ = h + eo;
    child_table_ = h + co;
    child_count_ = cs / 4;
    strings_ = h + so;
    strings_size_ = ss;
    regular_ = Load32(h + v1::kRegularParts);
    replicated_ = Load32(h + v1::kReplicatedPart);
    for (uint32_t i = 0; i < parts_; ++i) {
      const char* r = h + po + uint64_t{i} * format::kPartRecordSize;
      uint64_t no = Load64(r), nl = Load32(r + 8);
      if (!RangeWithin(no, nl, ss) || nl == 0) return Damaged(dir, "partition name");
      std::string name(strings_ + no, nl);
      if (name.find('/') != std::string::npos || name == "." || name == "..") return Damaged(dir, "partition name");
      part_names_.push_back(name);
    }
    part_fds_.assign(parts_, -1);
    return Status::Ok();
  }

  const std::string& dir() const { return dir_; }
  uint64_t entries() const { return entries_; }
  uint32_t regular_parts() const { return regular_; }
  uint32_t replicated_part() const { return replicated_; }
  const char* Record(uint64_t id) const { return entry_table_ + id * format::kEntrySizeV2; }
  bool Path(uint64_t id, std::string_view* out) const {
    const char* r = Record(id);
    uint64_t po = Load64(r), pl = Load32(r + 8);
    if (!RangeWithin(po, pl, strings_size_)) return false;
    *out = std::string_view(strings_ + po, pl);
    return true;
  }
  bool Child(uint64_t first, uint64_t i, uint32_t* id) const {
    if (first + i >= child_count_) return false;
    *id = Load32(child_table_ + (first + i) * 4);
    return *id < entries_;
  }

  // The partition file of `part`, opened and header-checked once.
  Result<int> PartFd(uint32_t part) {
    if (part >= parts_) return Damaged(dir_, "partition id");
    if (part_fds_[part] >= 0) return part_fds_[part];
    const std::string path = dir_ + "/" + part_names_[part];
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO fails below, not waits)
    if (fd < 0 && errno == ENOENT)
      return Status(Code::kNotFound,
                    "partition " + path + " is missing: copy it next to the image's index.fsi, then convert again");
    if (fd < 0) return Status::FromErrno(errno, "cannot open " + path);
    char h[format::kPartHeaderSize];
    Status s = PreadFull(fd, h, sizeof h, 0, part_names_[part]);
    if (s.ok() && (std::memcmp(h, format::kPartMagic, 8) != 0 || Load32(h + 8) != 1 || Load32(h + 16) != part ||
                   Xxh3(h, format::phdr::kHeaderXxh3) != Load64(h + format::phdr::kHeaderXxh3)))
      s = Damaged(dir_, part_names_[part] + " header");
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
    part_fds_[part] = fd;
    return fd;
  }

 private:
  std::string dir_;
  const char* base_ = nullptr;
  size_t len_ = 0;
  uint64_t entries_ = 0;
  const char* entry_table_ = nullptr;
  const char* child_table_ = nullptr;
  uint64_t child_count_ = 0;
  const char* strings_ = nullptr;
  uint64_t strings_size_ = 0;
  uint32_t parts_ = 0, regular_ = 0, replicated_ = 0;
  std::vector<std::string> part_names_;
  std::vector<int> part_fds_;
};

// One v1 file decoded front to back; its whole-file XXH3 is checked when the end is read.
class V1Stream final : public SourceStream {
 public:
  V1Stream(int fd, uint64_t offset, uint64_t stored, uint64_t size, uint32_t codec, uint64_t checksum, std::string name)
      : fd_(fd),
        offset_(offset),
        stored_(stored),
        size_(size),
        codec_(codec),
        checksum_(checksum),
        name_(std::move(name)),
        hash_(XXH3_createState(), &XXH3_freeState),
        in_(new char[kIn]) {
    XXH3_64bits_reset(hash_.get());
    if (codec_ == format::kCodecZstd) dctx_.reset(ZSTD_createDStream());
  }

  Result<size_t> Read(char* buf, size_t n) override {
    size_t got = 0;
    while (got < n && produced_ < size_) {
      size_t k;
      if (codec_ == format::kCodecRaw) {
        k = static_cast<size_t>(std::min<uint64_t>(n - got, size_ - produced_));
        Status s = PreadFull(fd_, buf + got, k, offset_ + produced_, name_);
        if (!s.ok()) return s;
      } else {
        auto r = Inflate(buf + got, n - got);
        if (!r.ok()) return r.status();
        k = *r;
      }
      Xxh3Update(hash_.get(), buf + got, k);
      got += k;
      produced_ += k;
    }
    if (got == 0 && !checked_) {  // the end: everything was produced, so the checksum must hold now
      checked_ = true;
      if (XXH3_64bits_digest(hash_.get()) != checksum_)
        return Status(Code::kCorrupt,
                      name_ + ": checksum mismatch in the old image: convert cannot copy it; re-pack the source");
    }
    return got;
  }

 private:
  struct DStreamFree {
    void operator()(ZSTD_DStream* d) const { ZSTD_freeDStream(d); }
  };
  static constexpr size_t kIn = 1 << 20;

  Result<size_t> Inflate(char* out, size_t cap) {
    cap = static_cast<size_t>(std::min<uint64_t>(cap, size_ - produced_));
    ZSTD_outBuffer ob{out, cap, 0};
    while (ob.pos == 0) {
      if (ib_.pos == ib_.size) {
        if (consumed_ == stored_)
          return Status(Code::kCorrupt, name_ + ": compressed frame ends early in the old image");
        size_t m = static_cast<size_t>(std::min<uint64_t>(kIn, stored_ - consumed_));
        Status s = PreadFull(fd_, in_.get(), m, offset_ + consumed_, name_);
        if (!s.ok()) return s;
        consumed_ += m;
        ib_ = {in_.get(), m, 0};
      }
      size_t r = ZSTD_decompressStream(dctx_.get(), &ob, &ib_);
      if (ZSTD_isError(r))
        return Status(Code::kCorrupt, name_ + ": zstd: " + ZSTD_getErrorName(r) + " in the old image");
    }
    return ob.pos;
  }

  int fd_;
  uint64_t offset_, stored_, size_;
  uint32_t codec_;
  uint64_t checksum_;
  std::string name_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_;
  std::unique_ptr<char[]> in_;
  std::unique_ptr<ZSTD_DStream, DStreamFree> dctx_;
  ZSTD_inBuffer ib_{nullptr, 0, 0};
  uint64_t consumed_ = 0, produced_ = 0;
  bool checked_ = false;
};

class V1Source final : public PackSource {
 public:
  explicit V1Source(V1Image* img) : img_(img) {}
  Result<std::unique_ptr<SourceStream>> Open(const PackTree& tree, uint32_t id) override {
    const char* r = img_->Record(id);
    const uint32_t part = Load32(r + format::ent::kPart), codec = Load32(r + format::ent::kCodec);
    const uint64_t offset = Load64(r + format::ent::kOffset), stored = Load64(r + format::ent::kStoredSize);
    const uint64_t size = Load64(r + format::ent::kSize);
    auto fd = img_->PartFd(part);
    if (!fd.ok()) return fd.status();
    if (codec > format::kCodecZstd || (codec == format::kCodecRaw && stored != size) ||
        offset < format::kPartHeaderSize || !RangeWithin(offset, stored, format::kMaxStoredOffset) ||
        size > format::kMaxStoredOffset)
      return Damaged(img_->dir(), "entry of " + Describe(tree, id));
    return std::unique_ptr<SourceStream>(
        new V1Stream(*fd, offset, stored, size, codec, Load64(r + format::ent::kChecksum), Describe(tree, id)));
  }
  std::string Describe(const PackTree& tree, uint32_t id) const override {
    return Printable(img_->dir() + ":" + std::string(tree.Path(tree.nodes[id])));
  }

 private:
  V1Image* img_;
};

// The v1 tree as pack's tree: same ids, paths, stat data, listings and partitions.
Status BuildTree(const V1Image& img, PackTree* tree) {
  tree->nodes.resize(img.entries());
  for (uint64_t id = 0; id < img.entries(); ++id) {
    const char* r = img.Record(id);
    PackNode& n = tree->nodes[id];
    std::string_view path;
    if (!img.Path(id, &path)) return Damaged(img.dir(), "path of entry " + std::to_string(id));
    n.path_off = tree->paths.size();
    n.path_len = static_cast<uint32_t>(path.size());
    tree->paths.append(path);
    n.name_off = std::min<uint32_t>(Load32(r + format::ent::kNameOff), n.path_len);
    n.parent = Load32(r + format::ent::kParent);
    n.mode = Load32(r + format::ent::kMode);
    n.size = Load64(r + format::ent::kSize);
    n.mtime_sec = static_cast<int64_t>(Load64(r + format::ent::kMtimeSec));
    n.mtime_nsec = Load32(r + format::ent::kMtimeNsec);
    n.nlink = Load32(r + format::ent::kNlink);
    n.uid = static_cast<uint32_t>(::getuid());  // version 1 stored no owner: the converting user's
    n.gid = static_cast<uint32_t>(::getgid());
    n.blocks = n.size / 4096 * 8 + (n.size % 4096 ? 8 : 0);  // as a 4 KiB-block file system stores it
    if (n.parent >= img.entries()) return Damaged(img.dir(), "parent of " + std::string(path));
    if ((n.mode & S_IFMT) != S_IFDIR && (n.mode & S_IFMT) != S_IFREG)
      return Damaged(img.dir(), "type of " + std::string(path));
    if ((n.mode & S_IFMT) == S_IFDIR) {
      ++tree->dirs;
      const uint64_t first = Load32(r + format::ent::kChildFirst), count = Load32(r + format::ent::kChildCount);
      n.child_first = static_cast<uint32_t>(tree->children.size());
      n.child_count = static_cast<uint32_t>(count);
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t child;
        if (!img.Child(first, i, &child)) return Damaged(img.dir(), "listing of " + std::string(path));
        tree->children.push_back(child);
      }
    } else if ((n.mode & S_IFMT) == S_IFREG) {
      ++tree->files;
      n.part = Load32(r + format::ent::kPart);
    } else {
      return Damaged(img.dir(), "type of " + std::string(path));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<PackReport> Convert(const PackOptions& opts_in, const std::function<void(const PackProgress&)>& progress,
                           const std::function<void(const std::string&)>& warn) {
  const auto start = std::chrono::steady_clock::now();
  PackOptions opts = opts_in;
  V1Image old;
  Status s = old.Open(opts.source);
  if (!s.ok()) return s;
  opts.parts = old.regular_parts();
  PackTree tree;
  if (!(s = BuildTree(old, &tree)).ok()) return s;
  for (const PackNode& n : tree.nodes)
    if ((n.mode & S_IFMT) == S_IFREG && n.part > opts.parts) return Damaged(old.dir(), "partition of a file");
  V1Source source(&old);
  auto rep = WriteImageKeepingPartitions(opts, &tree, &source, progress, warn);
  if (rep.ok()) rep->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

}  // namespace fanstore
