// Image: the mmap'd index (validated once, then read in place, every field bounds-checked where it is used)
// and lazily opened partitions read with pread only.
#include "fanstore/image.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <memory>

#include "decode_internal.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "hash.hpp"
#include "index_trust.hpp"
#include "owned_fd.hpp"

namespace fanstore {

using namespace format;

bool Entry::is_dir() const { return (mode & S_IFMT) == S_IFDIR; }
bool Entry::is_reg() const { return (mode & S_IFMT) == S_IFREG; }
bool Entry::is_link() const { return (mode & S_IFMT) == S_IFLNK; }
unsigned char Entry::d_type() const { return is_dir() ? DT_DIR : is_link() ? DT_LNK : DT_REG; }

namespace {
// An opened, header-checked partition: published once through an atomic pointer, never changed after.
struct PartState {
  int fd = -1;
  uint64_t data_end = 0;  // kPartHeaderSize + data_size from its header (the file was at least this long)
  // Which file the fd was at open: a host program may close our fd behind our back (a raw close_range syscall)
  // and get the number again for another file, which must never be read (or closed) as a partition.
  dev_t dev = 0;
  ino_t ino = 0;
  bool StillOurs() const { return NamesFile(fd, dev, ino); }
};
}  // namespace

struct Image::Impl {
  std::string dir;
  std::string index_file;
  std::string part_dir;
  const char* base = nullptr;  // the mmap'd index
  size_t len = 0;
  uint32_t version = kVersion;
  uint32_t entry_size = kEntrySize;  // by version
  uint64_t entries = 0;
  const char* entry_table = nullptr;
  const char* child_table = nullptr;
  uint64_t child_count = 0;
  const char* hash_table = nullptr;
  uint64_t buckets = 0;
  const char* part_table = nullptr;
  uint32_t parts = 0;  // regular + replicated
  uint32_t regular_parts = 0;
  uint32_t replicated_part = kNoPartition;
  const char* chunk_table = nullptr;
  uint64_t chunk_count = 0;
  uint32_t chunk_shift = kDefaultChunkShift;
  const char* strings = nullptr;
  uint64_t strings_size = 0;
  uint64_t image_id = 0;
  std::string trust_token;

  // One state per partition, made (and its header checked) on first use; null until then.
  std::unique_ptr<std::atomic<PartState*>[]> part_states;

  ~Impl() {
    if (base) ::munmap(const_cast<char*>(base), len);
    for (uint32_t p = 0; part_states && p < parts; ++p)
      if (PartState* s = part_states[p].load()) {
        if (s->StillOurs()) ::close(s->fd);
        delete s;
      }
  }

  const char* Record(uint32_t id) const { return entry_table + uint64_t{id} * entry_size; }
  std::string_view PartName(uint32_t p) const {
    const char* r = part_table + uint64_t{p} * kPartRecordSize;
    return std::string_view(strings + Load64(r + prec::kNameOff), Load32(r + prec::kNameLen));
  }
  std::string PartPath(uint32_t p) const {
    return (part_dir.empty() ? dir : part_dir) + "/" + std::string(PartName(p));
  }
  Result<const PartState*> Part(uint32_t p) const;
};

namespace {

Status Truncated(uint64_t have, uint64_t want) {
  return Status(Code::kCorrupt, "index.fsi is truncated (" + std::to_string(have) + " of " + std::to_string(want) +
                                    " bytes): re-pack or copy the image again");
}
Status BadIndex(const std::string& what) {
  return Status(Code::kCorrupt, "index.fsi is damaged (" + what + "): re-pack or copy the image again");
}

bool SectionOk(uint64_t off, uint64_t size, uint64_t lo, uint64_t hi) {
  return off >= lo && RangeWithin(off, size, hi);
}

// Structural checks beyond the checksums, so that even a crafted index with valid checksums cannot
// make accessors read outside the mapping. Per-entry fields are checked where they are read instead.
Status ValidateLayout(Image::Impl* m) {
  const char* h = m->base;
  const uint64_t len = m->len;
  uint64_t entries = Load64(h + hdr::kEntryCount);
  uint64_t eo = Load64(h + hdr::kEntriesOff), es = Load64(h + hdr::kEntriesSize);
  uint64_t co = Load64(h + hdr::kChildrenOff), cs = Load64(h + hdr::kChildrenSize);
  uint64_t ho = Load64(h + hdr::kHashOff), hs = Load64(h + hdr::kHashSize);
  uint64_t po = Load64(h + hdr::kPartsOff), ps = Load64(h + hdr::kPartsSize);
  uint64_t ko = Load64(h + hdr::kChunksOff), ks = Load64(h + hdr::kChunksSize);
  uint64_t so = Load64(h + hdr::kStringsOff), ss = Load64(h + hdr::kStringsSize);
  for (auto [o, s] : {std::pair{eo, es}, {co, cs}, {ho, hs}, {po, ps}, {ko, ks}, {so, ss}})
    if (!SectionOk(o, s, kHeaderSize, len)) return BadIndex("a section lies outside the file");
  m->version = Load32(h + hdr::kVersion);
  m->entry_size = EntrySize(m->version);
  if (entries == 0 || entries >= kEmptyBucket || es != entries * m->entry_size) return BadIndex("entry table size");
  if (cs % 4 != 0) return BadIndex("child table size");
  uint64_t buckets = hs / kBucketSize;
  if (hs % kBucketSize != 0 || buckets <= entries || (buckets & (buckets - 1)) != 0) return BadIndex("hash table size");
  uint64_t chunks = Load64(h + hdr::kChunkCount);
  if (ks % kChunkRecordSize != 0 || ks / kChunkRecordSize != chunks) return BadIndex("chunk table size");
  uint32_t shift = Load32(h + hdr::kChunkShift);
  if (shift < kMinChunkShift || shift > kMaxChunkShift) return BadIndex("chunk size");
  uint32_t parts = Load32(h + hdr::kPartitionCount);
  uint32_t regular = Load32(h + hdr::kRegularParts), rep = Load32(h + hdr::kReplicatedPart);
  if (ps != uint64_t{parts} * kPartRecordSize) return BadIndex("partition table size");
  if (!(rep == kNoPartition ? parts == regular : (rep == regular && parts == regular + 1)))
    return BadIndex("partition counts");
  m->entries = entries;
  m->entry_table = h + eo;
  m->child_table = h + co;
  m->child_count = cs / 4;
  m->hash_table = h + ho;
  m->buckets = buckets;
  m->part_table = h + po;
  m->parts = parts;
  m->regular_parts = regular;
  m->replicated_part = rep;
  m->chunk_table = h + ko;
  m->chunk_count = chunks;
  m->chunk_shift = shift;
  m->strings = h + so;
  m->strings_size = ss;
  m->image_id = Load64(h + hdr::kImageId);
  for (uint32_t p = 0; p < parts; ++p) {
    const char* r = m->part_table + uint64_t{p} * kPartRecordSize;
    uint64_t no = Load64(r + prec::kNameOff);
    uint32_t nl = Load32(r + prec::kNameLen);
    if (!SectionOk(no, nl, 0, ss)) return BadIndex("partition name");
    std::string_view name = m->PartName(p);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
        name.find('\0') != std::string_view::npos)
      return BadIndex("partition name");
  }
  const char* root = m->Record(kRootId);
  if (Load32(root + ent::kPathLen) != 0 || (Load32(root + ent::kMode) & S_IFMT) != S_IFDIR)
    return BadIndex("root entry");
  return Status::Ok();
}

// Everything up to the body checksum. `trusted`: the caller vouches for the body (trust token matched).
Status ValidateHeader(const char* h, uint64_t len, bool trusted) {
  if (len < sizeof kIndexMagic && std::memcmp(h, kIndexMagic, len) == 0) return Truncated(len, kHeaderSize);
  if (len < sizeof kIndexMagic || std::memcmp(h, kIndexMagic, sizeof kIndexMagic) != 0)
    return Status(Code::kCorrupt,
                  "index.fsi is not a FanStore index (bad magic): pass an image made by `fanstore pack`");
  if (len < hdr::kVersion + 4) return Truncated(len, kHeaderSize);
  uint32_t version = Load32(h + hdr::kVersion);
  if (version > kVersion) {
    // A flipped bit reads as a newer version too: a header checksum that fails where this version keeps it says
    // which is likelier.
    if (len >= kHeaderSize && Xxh3(h, hdr::kHeaderXxh3) != Load64(h + hdr::kHeaderXxh3))
      return Status(Code::kCorrupt, "index.fsi reads as image version " + std::to_string(version) +
                                        " but its header checksum does not match: it is most likely damaged (copy "
                                        "the image again or re-pack); if a newer fanstore made it, upgrade fanstore");
    return Status(Code::kUnsupported, "image version " + std::to_string(version) + " is newer than this fanstore (" +
                                          std::to_string(kVersion) + "): upgrade fanstore or re-pack");
  }
  if (version == 1)
    return Status(Code::kUnsupported,
                  "image version 1 was made by an older fanstore and is not served any more: convert it once with "
                  "`fanstore convert IMAGE -o NEW_IMAGE` (or re-pack the source)");
  if (version == 0) return BadIndex("version 0");
  static_assert(kOldestServedVersion == 2, "the checks above name version 1 as the one not served");
  if (len < kHeaderSize) {
    uint64_t want = len >= hdr::kIndexSize + 8 ? Load64(h + hdr::kIndexSize) : kHeaderSize;
    return Truncated(len, want > len ? want : kHeaderSize);
  }
  if (Xxh3(h, hdr::kHeaderXxh3) != Load64(h + hdr::kHeaderXxh3)) return BadIndex("header checksum mismatch");
  if (Load32(h + hdr::kHeaderSize) != kHeaderSize) return BadIndex("header size");
  uint64_t want = Load64(h + hdr::kIndexSize);
  if (len < want) return Truncated(len, want);
  if (len > want) return BadIndex("trailing bytes after the index");
  if (!trusted && Xxh3(h + kHeaderSize, len - kHeaderSize) != Load64(h + hdr::kBodyXxh3))
    return BadIndex("body checksum mismatch");
  return Status::Ok();
}

Status BadEntry(const Entry& e, const std::string& what) {
  return Status(Code::kCorrupt,
                "index.fsi: bad entry for " + Printable(e.path) + " (" + what + "): re-pack or copy the image again");
}

// The entry's offset, stored size and size are below format::kMaxStoredOffset: sums of two cannot wrap.
bool SizesBounded(const Entry& e) {
  return e.offset <= kMaxStoredOffset && e.stored_size <= kMaxStoredOffset && e.size <= kMaxStoredOffset;
}

Status CheckPartHeader(const char* h, uint32_t p, uint64_t image_id, const std::string& path) {
  const std::string name = path.substr(path.rfind('/') + 1);
  if (std::memcmp(h, kPartMagic, sizeof kPartMagic) != 0 || Load32(h + phdr::kVersion) != kPartVersion ||
      Load32(h + phdr::kHeaderSize) != kPartHeaderSize || Xxh3(h, phdr::kHeaderXxh3) != Load64(h + phdr::kHeaderXxh3) ||
      Load64(h + phdr::kDataSize) > kMaxStoredOffset)
    return Status(Code::kCorrupt, name + " has a damaged header: copy the image again or re-pack");
  if (Load64(h + phdr::kImageId) != image_id)
    return Status(Code::kCorrupt,
                  path + " belongs to another image: copy the partitions of this image next to its index");
  if (const uint32_t held = Load32(h + phdr::kPartId); held != p)
    return Status(Code::kCorrupt, path + " holds partition " + std::to_string(held) + " of this image, not " +
                                      std::to_string(p) +
                                      ": the partition files were renamed; copy them again under their own names");
  return Status::Ok();
}

}  // namespace

Status Image::CheckPartitionHeader(uint32_t part, const char* header) const {
  return CheckPartHeader(header, part, impl_->image_id, PartitionPath(part));
}

Result<const PartState*> Image::Impl::Part(uint32_t p) const {
  if (p >= parts) return Status(Code::kCorrupt, "partition " + std::to_string(p) + " is not in the index");
  PartState* seen = part_states[p].load(std::memory_order_acquire);
  if (seen && seen->StillOurs()) return seen;
  // seen: the number is someone else's file now. Never read or close it; open the partition again below. The
  // stale state stays allocated (another thread may still hold it); that happens once per such close.
  // No lock: two threads may both open and validate; the loser closes its fd. A mutex here could be
  // held by another thread across fork() and deadlock a DataLoader worker.
  const std::string path = PartPath(p);
  const std::string name(PartName(p));
  // The reasons are the same words for verify and every read path (missing, not a file, damaged, foreign).
  // O_NONBLOCK: a FIFO in its place is refused below instead of blocking the open (no effect on a regular file).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return Status(Code::kIoError, "partition " + path +
                                        " is missing: copy it next to the index (or, with its "
                                        "partitions spread over nodes, read the image through `fanstore serve`)");
    if (err == EMFILE) {
      // Not damage: a reader keeps each partition it has read open, and this process may not open another file.
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      return Status(Code::kIoError, "cannot open partition " + path + ": " + std::strerror(err) +
                                        ": a reader keeps one open file per partition it reads, and this image has " +
                                        std::to_string(parts) + " (open files allowed: " + std::to_string(rl.rlim_cur) +
                                        "): raise `ulimit -n`, or pack the image with fewer --parts");
    }
    if (err == ENFILE)
      return Status(Code::kIoError, "cannot open partition " + path + ": " + std::strerror(err) +
                                        ": the system's table of open files is full; retry when fewer are open");
    return Status(Status::FromErrno(err, "").code(), "cannot open partition " + path + ": " + std::strerror(err));
  }
  // Above the numbers a program's own files get (select(2) takes fds below 1024 only): with hundreds of partitions
  // open, the program's sockets and pipes would otherwise get numbers it cannot select on. Kept where it is when the
  // limit leaves no room up there.
  fd = MoveAboveProgramFds(fd);
  char h[kPartHeaderSize];
  struct stat st {};
  Status s;
  if (::fstat(fd, &st) != 0) s = Status::FromErrno(errno, "cannot stat partition " + path);
  else if (!S_ISREG(st.st_mode))
    s = Status(Code::kCorrupt,
               "partition " + path + " is not a regular file: copy the image's partitions next to its index");
  if (s.ok()) s = PreadFull(fd, h, sizeof h, 0, name);
  if (s.ok()) s = CheckPartHeader(h, p, image_id, path);
  // A partition shorter than its header says (truncated, or still being copied) stays usable: every read is a
  // pread checked for length, so the files still there read and those cut off fail with kCorrupt.
  const uint64_t data_size = Load64(h + phdr::kDataSize);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  auto* mine = new PartState{fd, kPartHeaderSize + data_size, st.st_dev, st.st_ino};
  PartState* expected = seen;
  if (!part_states[p].compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    ::close(fd);
    delete mine;
    return expected;
  }
  return mine;
}

Image::Image(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Image::~Image() = default;

Result<std::shared_ptr<const Image>> Image::Open(const std::string& dir, const ImageOpenOptions& opts) {
  auto m = std::make_unique<Impl>();
  m->dir = dir;
  m->part_dir = opts.partition_dir;
  const std::string path = opts.index_file.empty() ? dir + "/" + kIndexName : opts.index_file;
  m->index_file = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO: refused below, not waited on)
  if (fd < 0) {
    int err = errno;
    struct stat st;
    if (err == ENOENT && ::stat(dir.c_str(), &st) == 0)
      return Status(Code::kNotFound,
                    dir + " is not a FanStore image (no index.fsi): pass the directory `fanstore pack -o` made");
    if (err == ENOENT)
      return Status(Code::kNotFound, "image " + dir + " does not exist: pass the directory `fanstore pack -o` made");
    if (err == ENOTDIR && opts.index_file.empty())
      return Status(Code::kNotDirectory, "image " + dir +
                                             " is not a directory: pass the directory `fanstore pack -o` made (the one "
                                             "holding index.fsi)");
    return Status::FromErrno(err, "cannot open image " + path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "cannot stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(Code::kCorrupt, path + " is not a regular file: pass the directory `fanstore pack -o` made");
  }
  m->len = static_cast<size_t>(st.st_size);
  if (m->len == 0) {
    ::close(fd);
    return Truncated(0, kHeaderSize);
  }
  void* p = ::mmap(nullptr, m->len, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping stays valid without the fd
  if (p == MAP_FAILED && err == ENODEV)  // e.g. sshfs -o direct_io, some FUSE file systems
    return Status::FromErrno(err, "cannot map " + path +
                                      " (its file system does not allow memory maps: copy the image to one that "
                                      "does, or mount it without direct I/O)");
  if (p == MAP_FAILED) return Status::FromErrno(err, "cannot map " + path);
  m->base = static_cast<const char*>(p);
  const uint64_t body_xxh3 = m->len >= kHeaderSize ? Load64(m->base + hdr::kBodyXxh3) : 0;
  const bool trusted = !opts.trust_token.empty() && index_trust::Matches(opts.trust_token, st, body_xxh3);
  Status s = ValidateHeader(m->base, m->len, trusted);
  if (s.ok()) s = ValidateLayout(m.get());
  if (!s.ok()) return s;
  m->trust_token = index_trust::Make(st, body_xxh3);
  m->part_states.reset(new std::atomic<PartState*>[m->parts]);
  for (uint32_t i = 0; i < m->parts; ++i) m->part_states[i].store(nullptr);
  return std::shared_ptr<const Image>(new Image(std::move(m)));
}

const std::string& Image::dir() const { return impl_->dir; }
const std::string& Image::IndexFile() const { return impl_->index_file; }

Status CopyIndexFile(const std::string& path, int fd) {
  int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (in < 0) return Status::FromErrno(errno, "cannot open " + path);
  struct stat st {};
  Status s;
  if (::fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) s = Status(Code::kCorrupt, path + " is not a regular file");
  off_t off = 0;
  while (s.ok() && off < st.st_size) {
    ssize_t n = ::sendfile(fd, in, &off, static_cast<size_t>(st.st_size - off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = Status::FromErrno(errno, "copying " + path);
    else if (n == 0) s = Status(Code::kCorrupt, path + " shrank while it was copied");
  }
  ::close(in);
  return s;
}
uint64_t Image::size() const { return impl_->entries; }
uint64_t Image::ImageId() const { return impl_->image_id; }
std::string Image::TrustToken() const { return impl_->trust_token; }
uint64_t Image::ContentKey() const {
  char k[32];
  Store64(k, impl_->image_id);
  Store64(k + 8, Load64(impl_->base + hdr::kBodyXxh3));
  Store64(k + 16, impl_->chunk_shift);
  Store64(k + 24, impl_->entries);
  return Xxh3(k, sizeof k);
}
uint32_t Image::ChunkSize() const { return uint32_t{1} << impl_->chunk_shift; }
uint64_t Image::ChunkTableSize() const { return impl_->chunk_count; }
uint64_t Image::ChunkCount(const Entry& e) const {
  return e.is_reg() ? format::ChunkCount(e.size, impl_->chunk_shift) : 0;
}

Entry Image::Get(uint32_t id) const {
  Entry e;
  if (id >= impl_->entries) return e;
  const char* r = impl_->Record(id);
  e.id = id;
  e.parent = Load32(r + ent::kParent);
  uint64_t po = Load64(r + ent::kPathOff);
  uint32_t pl = Load32(r + ent::kPathLen);
  if (SectionOk(po, pl, 0, impl_->strings_size)) e.path = std::string_view(impl_->strings + po, pl);
  uint32_t no = Load32(r + ent::kNameOff);
  e.name = e.path.substr(std::min<size_t>(no, e.path.size()));
  e.mode = Load32(r + ent::kMode);
  e.size = Load64(r + ent::kSize);
  if (impl_->version >= 3) {
    e.uid = Load32(r + ent::kUid);
    e.gid = Load32(r + ent::kGid);
    e.blocks = Load64(r + ent::kBlocks);
  }
  e.mtime_sec = static_cast<int64_t>(Load64(r + ent::kMtimeSec));
  e.mtime_nsec = Load32(r + ent::kMtimeNsec);
  e.ino = Load64(r + ent::kIno);
  e.nlink = Load32(r + ent::kNlink);
  e.part = Load32(r + ent::kPart);
  e.codec = static_cast<Codec>(Load32(r + ent::kCodec));
  e.offset = Load64(r + ent::kOffset);
  e.stored_size = Load64(r + ent::kStoredSize);
  e.checksum = Load64(r + ent::kChecksum);
  if (e.is_reg()) e.chunk_first = Load64(r + ent::kChunkFirst);
  return e;
}

namespace {
// The hash table probe alone: the entry id of exactly `rel`, or kEmptyBucket.
uint32_t FindExact(const Image::Impl& m, std::string_view rel) {
  const uint64_t h = XXH3_64bits(rel.data(), rel.size());
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  uint64_t b = h & (m.buckets - 1);
  for (uint64_t probes = 0; probes < m.buckets; ++probes, b = (b + 1) & (m.buckets - 1)) {
    const char* slot = m.hash_table + b * kBucketSize;
    uint32_t id = Load32(slot);
    if (id == kEmptyBucket) break;
    if (Load32(slot + 4) != tag || id >= m.entries) continue;
    const char* r = m.Record(id);
    uint64_t po = Load64(r + ent::kPathOff);
    uint32_t pl = Load32(r + ent::kPathLen);
    if (pl == rel.size() && SectionOk(po, pl, 0, m.strings_size) &&
        (pl == 0 || std::memcmp(m.strings + po, rel.data(), pl) == 0))
      return id;
  }
  return kEmptyBucket;
}
}  // namespace

Result<uint32_t> Image::Lookup(std::string_view rel) const {
  uint32_t id = FindExact(*impl_, rel);
  if (id != kEmptyBucket) return id;
  // POSIX wants ENOTDIR when a leading component is a file ("a.jpg/x"): look at the deepest existing
  // parent. Misses only, at most one probe per component.
  for (size_t cut = rel.rfind('/'); cut != std::string_view::npos && cut > 0; cut = rel.rfind('/', cut - 1)) {
    uint32_t parent = FindExact(*impl_, rel.substr(0, cut));
    if (parent == kEmptyBucket) continue;
    if (!Get(parent).is_dir())
      return Status(Code::kNotDirectory, "not a directory in the image: " + Printable(rel.substr(0, cut)));
    break;
  }
  return Status(Code::kNotFound, "no such file in the image: " + Printable(rel));
}

Result<std::string_view> Image::LinkTarget(const Entry& e) const {
  if (!e.is_link() || e.size == 0 || e.size > kMaxLinkTarget || !SectionOk(e.offset, e.size, 0, impl_->strings_size))
    return BadEntry(e, "symlink target");
  std::string_view t(impl_->strings + e.offset, e.size);
  if (t.find('\0') != std::string_view::npos) return BadEntry(e, "symlink target");
  return t;
}

uint32_t Image::ChildCount(uint32_t dir_id) const {
  if (dir_id >= impl_->entries) return 0;
  const char* r = impl_->Record(dir_id);
  if ((Load32(r + ent::kMode) & S_IFMT) != S_IFDIR) return 0;
  uint64_t first = Load32(r + ent::kChildFirst), n = Load32(r + ent::kChildCount);
  return SectionOk(first, n, 0, impl_->child_count) ? static_cast<uint32_t>(n) : 0;
}

uint32_t Image::Child(uint32_t dir_id, uint32_t i) const {
  if (i >= ChildCount(dir_id)) return kRootId;
  uint64_t first = Load32(impl_->Record(dir_id) + ent::kChildFirst);
  uint32_t id = Load32(impl_->child_table + (first + i) * 4);
  return id < impl_->entries ? id : kRootId;
}

ImageSummary Image::Summary() const {
  const char* h = impl_->base;
  ImageSummary s;
  s.version = Load32(h + hdr::kVersion);
  s.files = Load64(h + hdr::kFileCount);
  s.dirs = Load64(h + hdr::kDirCount);
  s.links = impl_->version >= 3 ? Load64(h + hdr::kLinkCount) : 0;
  s.bytes_in = Load64(h + hdr::kBytesIn);
  s.bytes_stored = Load64(h + hdr::kBytesStored);
  s.chunk_size = ChunkSize();
  s.chunks = impl_->chunk_count;
  s.parts = impl_->regular_parts;
  s.replicated_part = impl_->replicated_part;
  for (uint32_t p = 0; p < impl_->parts; ++p) {
    const char* r = impl_->part_table + uint64_t{p} * kPartRecordSize;
    s.part_bytes.push_back(Load64(r + prec::kStoredBytes));
    s.part_files.push_back(Load64(r + prec::kFileCount));
  }
  return s;
}

bool Image::HoldsSharedLibraries() const {
  return impl_->version >= 3 && (Load32(impl_->base + hdr::kFlags) & kFlagSharedLibraries) != 0;
}

std::string Image::PartitionPath(uint32_t part) const {
  return part < impl_->parts ? impl_->PartPath(part) : std::string();
}

bool Image::HasPartition(uint32_t part) const { return PartitionStatus(part).ok(); }

Status Image::PartitionStatus(uint32_t part) const {
  auto r = impl_->Part(part);
  return r.ok() ? Status::Ok() : r.status();
}

Status Image::PartitionWhole(uint32_t part) const {
  auto r = impl_->Part(part);
  if (!r.ok()) return r.status();
  struct stat st {};
  if (::fstat((*r)->fd, &st) != 0) return Status::FromErrno(errno, "stat " + PartitionPath(part));
  if (static_cast<uint64_t>(st.st_size) >= (*r)->data_end) return Status::Ok();
  return Status(Code::kCorrupt, "partition " + PartitionPath(part) + " is truncated: " + std::to_string(st.st_size) +
                                    " of " + std::to_string((*r)->data_end) +
                                    " bytes (copy it again or re-pack); the files before the cut still read");
}

uint32_t Image::PartitionCount() const { return impl_->parts; }

namespace {
// What every file read checks first: file `id` exists, is not a directory, and has a possible layout.
Status FileChecks(const Image& img, uint32_t id, Entry* e) {
  if (id >= img.size()) return Status(Code::kNotFound, "no entry " + std::to_string(id) + " in the image");
  *e = img.Get(id);
  if (e->is_dir())
    return Status(Code::kIsDirectory, "is a directory: " + (e->path.empty() ? "/" : std::string(e->path)));
  if (e->is_link()) return Status(Code::kLoop, "is a symlink: " + std::string(e->path));  // as open(O_NOFOLLOW)
  return img.CheckLayout(*e);
}
}  // namespace

Status Image::CheckLayout(const Entry& e) const {
  if (!e.is_reg() || e.part >= impl_->parts) return BadEntry(e, "type or partition");
  if (!SizesBounded(e)) return BadEntry(e, "offset or size");
  if (e.size == 0 && e.stored_size != 0) return BadEntry(e, "stored bytes of an empty file");
  if (e.size == 0) return Status::Ok();
  auto first = GetChunk(e, 0);
  return first.ok() ? Status::Ok() : first.status();
}

Result<Chunk> Image::GetChunk(const Entry& e, uint64_t i) const {
  if (!e.is_reg() || e.part >= impl_->parts || !SizesBounded(e)) return BadEntry(e, "type, partition, offset or size");
  const uint64_t n = format::ChunkCount(e.size, impl_->chunk_shift);
  if (i >= n)
    return Status(Code::kInvalidArgument, "chunk " + std::to_string(i) + " is past the end of " + Printable(e.path));
  Chunk c;
  c.index = i;
  c.raw_offset = i << impl_->chunk_shift;
  c.raw_size = static_cast<uint32_t>(std::min<uint64_t>(e.size - c.raw_offset, ChunkSize()));
  uint64_t stored_off, stored_size;
  uint32_t codec;
  if (n == 1) {
    codec = static_cast<uint32_t>(e.codec);
    stored_off = 0;
    stored_size = e.stored_size;
    c.checksum = e.checksum;
    c.key = e.id;
  } else {
    if (e.codec != Codec::kChunked) return BadEntry(e, "codec of a multi-chunk file");
    if (e.chunk_first > impl_->chunk_count || n > impl_->chunk_count - e.chunk_first)
      return BadEntry(e, "chunk table range");
    const char* r = impl_->chunk_table + (e.chunk_first + i) * kChunkRecordSize;
    stored_off = Load64(r + chk::kStoredOff);
    stored_size = Load32(r + chk::kStoredSize);
    codec = Load32(r + chk::kCodec);
    c.checksum = Load64(r + chk::kChecksum);
    c.key = impl_->entries + e.chunk_first + i;
  }
  if (codec == kCodecRaw) {
    if (stored_size != c.raw_size) return BadEntry(e, "stored size of a raw chunk");
  } else if (codec == kCodecZstd) {
    if (stored_size == 0 || stored_size > MaxStoredSize(c.raw_size)) return BadEntry(e, "stored size of a zstd chunk");
  } else if (codec == kCodecZero) {
    if (stored_size != 0) return BadEntry(e, "stored size of a zero chunk");
  } else {
    return BadEntry(e, "codec " + std::to_string(codec));
  }
  if (!RangeWithin(stored_off, stored_size, e.stored_size)) return BadEntry(e, "chunk outside the file");
  c.codec = static_cast<Codec>(codec);
  c.offset = e.offset + stored_off;
  c.stored_size = static_cast<uint32_t>(stored_size);
  return c;
}

Status Image::ReadChunk(const Entry& e, const Chunk& c, char* out, char* scratch) const {
  if (c.codec == Codec::kZero) return DecodeChunk(e, c, nullptr, 0, out);  // nothing stored, nothing to read
  auto part = impl_->Part(e.part);
  if (!part.ok()) return part.status();
  const std::string_view name = impl_->PartName(e.part);
  // The index may claim anything: stored bytes must lie in the partition's data as its header states it
  // (checked against the file size at open). A partition truncated since gives a short pread: kCorrupt.
  if (c.offset < kPartHeaderSize || !RangeWithin(c.offset, c.stored_size, (*part)->data_end))
    return BadEntry(e, "stored bytes outside " + std::string(name));
  if (c.codec == Codec::kRaw) {
    Status s = ReadStoredChunk((*part)->fd, out, e, c, c.raw_size, std::string(name));
    if (!s.ok()) return s;
    return DecodeChunkAt(e, c, out, c.stored_size, out, std::string(name));
  }
  std::unique_ptr<char[]> own;
  if (scratch == nullptr) {
    own.reset(new char[c.stored_size]);
    scratch = own.get();
  }
  Status s = ReadStoredChunk((*part)->fd, scratch, e, c, c.stored_size, std::string(name));
  if (!s.ok()) return s;
  return DecodeChunkAt(e, c, scratch, c.stored_size, out, std::string(name));
}

Status Image::ReadStored(uint32_t id, std::string* out) const {
  Entry e;
  Status s = FileChecks(*this, id, &e);
  if (!s.ok()) return s;
  return ReadStoredRange(id, 0, e.stored_size, out);
}

Status Image::ReadStoredRange(uint32_t id, uint64_t offset, uint64_t length, std::string* out) const {
  Entry e;
  Status s = FileChecks(*this, id, &e);
  if (!s.ok()) return s;
  if (!RangeWithin(offset, length, e.stored_size))
    return Status(Code::kInvalidArgument, "stored range past the end of " + Printable(e.path));
  auto part = impl_->Part(e.part);
  if (!part.ok()) return part.status();
  const std::string name(impl_->PartName(e.part));
  const uint64_t at = e.offset + offset;
  if (at < kPartHeaderSize || !RangeWithin(at, length, (*part)->data_end))
    return BadEntry(e, "stored bytes outside " + name);
  out->resize(length);
  return PreadFull((*part)->fd, out->data(), length, at, name);
}

namespace {
// Decodes every chunk of `e` in order: into `out` when given, else into a scratch chunk (verify), feeding the
// whole-file hash. `strict` also requires the chunks to tile the stored range exactly, as pack writes them.
Status DecodeAllChunks(const Image& img, const Entry& e, char* out, bool strict) {
  const uint64_t n = img.ChunkCount(e);
  std::unique_ptr<char[]> scratch(out == nullptr && n > 0 ? new char[img.ChunkSize()] : nullptr);
  std::unique_ptr<char[]> stored(n > 0 ? new char[MaxStoredSize(img.ChunkSize())] : nullptr);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hs(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(hs.get());
  uint64_t expect_off = e.offset;
  for (uint64_t i = 0; i < n; ++i) {
    auto c = img.GetChunk(e, i);
    if (!c.ok()) return c.status();
    if (strict && c->offset != expect_off) return BadEntry(e, "chunks do not tile the stored bytes");
    expect_off = c->offset + c->stored_size;
    char* dst = out ? out + c->raw_offset : scratch.get();
    Status s = img.ReadChunk(e, *c, dst, stored.get());
    if (!s.ok()) return s;
    Xxh3Update(hs.get(), dst, c->raw_size);
  }
  if (strict && expect_off != e.offset + e.stored_size) return BadEntry(e, "chunks do not tile the stored bytes");
  if (XXH3_64bits_digest(hs.get()) != e.checksum)
    return CorruptFile(e, img.PartitionPath(e.part).substr(img.PartitionPath(e.part).find_last_of('/') + 1),
                       "whole-file checksum mismatch");
  return Status::Ok();
}
}  // namespace

Status Image::ReadFile(uint32_t id, void* out) const {
  Entry e;
  Status s = FileChecks(*this, id, &e);
  if (!s.ok()) return s;
  return DecodeAllChunks(*this, e, static_cast<char*>(out), false);
}

Status Image::CheckFile(uint32_t id) const {
  Entry e;
  Status s = FileChecks(*this, id, &e);
  if (!s.ok()) return s;
  return DecodeAllChunks(*this, e, nullptr, true);
}

}  // namespace fanstore
