// NodeCache: reading, offering and assembling decoded chunks in the shared cache directory (node_cache.hpp).
#include "node_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "decode_internal.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "owned_fd.hpp"

namespace fanstore {

using namespace node_cache_format;
using format::Load32;
using format::Load64;

namespace {

constexpr uint64_t kPage = 4096;
uint64_t PageRound(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }
uint64_t BitsBytes(uint64_t nbits) { return kBitsHeader + (nbits + 63) / 64 * 8; }

bool PwriteFull(int fd, const char* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return true;
}

uint64_t NowSeconds() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

struct NodeCache::Region {
  std::string name;  // "small" or "f<ID>"
  int data_fd = -1;
  struct stat data_st {};
  char* bits = nullptr;  // the mapped bits file
  size_t bits_len = 0;
  uint64_t nbits = 0;
  ~Region() {
    if (bits) ::munmap(bits, bits_len);
    // Close only what is still our file: the program may have closed the number and reused it.
    if (NamesFile(data_fd, data_st.st_dev, data_st.st_ino)) ::close(data_fd);
  }
  std::atomic_ref<uint64_t> Word(uint64_t i) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bits + kBitsHeader + (i / 64) * 8));
  }
  bool Test(uint64_t i) const { return i < nbits && (Word(i).load(std::memory_order_acquire) >> (i % 64)) & 1; }
  // Sets bit i; returns whether it was set before.
  bool Set(uint64_t i) const {
    const uint64_t m = uint64_t{1} << (i % 64);
    return (Word(i).fetch_or(m, std::memory_order_acq_rel) & m) != 0;
  }
};

NodeCache::NodeCache(std::string dir, const Image& img, int state_fd, char* state)
    : dir_(std::move(dir)),
      img_(img),
      shift_(static_cast<uint32_t>(std::countr_zero(img.ChunkSize()))),
      state_fd_(state_fd),
      state_(state),
      max_open_(std::max<size_t>(1, KeptFdCap(32, 16))) {}

NodeCache::~NodeCache() {
  files_.clear();
  small_.reset();
  if (state_) ::munmap(state_, kStateSize);
  if (state_fd_ >= 0) ::close(state_fd_);
}

void NodeCache::SetInternalFdHook(void (*hook)(int fd)) {
  std::lock_guard<std::mutex> lk(mu_);
  hook_ = hook;
  if (!hook) return;
  if (small_) hook(small_->data_fd);
  for (auto& [id, f] : files_) hook(f.first->data_fd);
}

std::atomic<uint64_t>& NodeCache::Used() {
  static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
  return *reinterpret_cast<std::atomic<uint64_t>*>(state_ + kStUsed);
}

Result<std::unique_ptr<NodeCache>> NodeCache::Attach(const std::string& dir, const Image& img) {
  const std::string path = dir + "/state";
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::FromErrno(errno, "node chunk cache " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::getuid() ||
      static_cast<size_t>(st.st_size) != kStateSize) {
    ::close(fd);
    return Status(Code::kCorrupt, "node chunk cache " + path + " is not ours or damaged");
  }
  void* p = ::mmap(nullptr, kStateSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "mapping " + path);
  }
  char* s = static_cast<char*>(p);
  if (std::memcmp(s + kStMagic, kStateMagic, sizeof kStateMagic) != 0 || Load32(s + kStVersion) != kVersion ||
      Load64(s + kStImageId) != img.ContentKey() || (uint32_t{1} << Load32(s + kStChunkShift)) != img.ChunkSize() ||
      Load64(s + kStEntries) != img.size()) {
    ::munmap(p, kStateSize);
    ::close(fd);
    return Status(Code::kCorrupt, "node chunk cache " + dir + " belongs to another image");
  }
  ::close(fd);  // the mapping is all we need
  std::unique_ptr<NodeCache> c(new NodeCache(dir, img, -1, s));
  c->small_ = c->OpenRegion("small", img.size() << c->shift_, img.size(), true);
  if (!c->small_) return Status(Code::kIoError, "node chunk cache " + dir + ": cannot open its files");
  return c;
}

std::shared_ptr<NodeCache::Region> NodeCache::OpenRegion(const std::string& name, uint64_t data_size, uint64_t nbits,
                                                         bool create) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = std::make_shared<Region>();
    r->name = name;
    r->nbits = nbits;
    const std::string data_path = dir_ + "/" + name + ".data", bits_path = dir_ + "/" + name + ".bits";
    r->data_fd = ::open(data_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (r->data_fd < 0) return nullptr;
    if (::fstat(r->data_fd, &r->data_st) != 0 || !S_ISREG(r->data_st.st_mode)) return nullptr;
    if (static_cast<uint64_t>(r->data_st.st_size) != data_size) {
      // A new file (size 0) gets its size; any other size is not a file we made for this entry.
      if (r->data_st.st_size != 0 || ::ftruncate(r->data_fd, static_cast<off_t>(data_size)) != 0) return nullptr;
    }
    r->data_fd = MoveAboveProgramFds(r->data_fd);
    if (hook_) hook_(r->data_fd);
    const size_t blen = BitsBytes(nbits);
    int bfd = ::open(bits_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (bfd < 0 && errno == ENOENT && create) {
      // Publish a complete bits file atomically (link fails if another process published one first).
      char tmp[64];
      std::snprintf(tmp, sizeof tmp, ".tmp-%d-%lx", static_cast<int>(::getpid()),
                    static_cast<unsigned long>(std::hash<std::thread::id>()(std::this_thread::get_id())));
      const std::string tmp_path = bits_path + tmp;
      int tfd = ::open(tmp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (tfd < 0) return nullptr;
      char h[kBitsHeader] = {};
      std::memcpy(h + kBtMagic, kBitsMagic, sizeof kBitsMagic);
      format::Store64(h + kBtDataIno, static_cast<uint64_t>(r->data_st.st_ino));
      format::Store64(h + kBtDataDev, static_cast<uint64_t>(r->data_st.st_dev));
      format::Store64(h + kBtBits, nbits);
      bool ok = ::ftruncate(tfd, static_cast<off_t>(blen)) == 0 && PwriteFull(tfd, h, sizeof h, 0);
      ::close(tfd);
      if (ok) (void)::link(tmp_path.c_str(), bits_path.c_str());
      ::unlink(tmp_path.c_str());
      bfd = ::open(bits_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    }
    if (bfd < 0) return nullptr;
    struct stat bst;
    void* m = MAP_FAILED;
    if (::fstat(bfd, &bst) == 0 && static_cast<uint64_t>(bst.st_size) == blen)
      m = ::mmap(nullptr, blen, PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0);
    ::close(bfd);
    if (m == MAP_FAILED) return nullptr;
    r->bits = static_cast<char*>(m);
    r->bits_len = blen;
    if (std::memcmp(r->bits + kBtMagic, kBitsMagic, sizeof kBitsMagic) == 0 && Load64(r->bits + kBtBits) == nbits &&
        Load64(r->bits + kBtDataIno) == static_cast<uint64_t>(r->data_st.st_ino) &&
        Load64(r->bits + kBtDataDev) == static_cast<uint64_t>(r->data_st.st_dev))
      return r;
    // Bits of another generation of the data file (an eviction raced with us): look again.
  }
  return nullptr;
}

std::shared_ptr<NodeCache::Region> NodeCache::RegionFor(const Entry& e, bool create) {
  const uint64_t n = img_.ChunkCount(e);
  if (n <= 1) return small_;
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = files_.find(e.id); it != files_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  const uint64_t now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  if (!create) {
    auto a = absent_.find(e.id);
    if (a != absent_.end() && now_ms < a->second + 1000) return nullptr;
  }
  auto r = OpenRegion("f" + std::to_string(e.id), e.size, n, create);
  if (!r) {
    if (!create) {
      if (absent_.size() > 4096) absent_.clear();
      absent_[e.id] = now_ms;
    }
    return nullptr;
  }
  absent_.erase(e.id);
  lru_.push_front(e.id);
  files_[e.id] = {r, lru_.begin()};
  while (files_.size() > max_open_) {
    files_.erase(lru_.back());
    lru_.pop_back();
  }
  return r;
}

size_t NodeCache::ReleaseIdle() {
  std::lock_guard<std::mutex> lk(mu_);
  const size_t n = files_.size();
  files_.clear();
  lru_.clear();
  return n;
}

bool NodeCache::Read(const Entry& e, const Chunk& c, char* out) { return ReadRange(e, c, 0, c.raw_size, out); }

bool NodeCache::ReadRange(const Entry& e, const Chunk& c, uint64_t from, size_t len, char* out) {
  if (!RangeWithin(from, len, c.raw_size)) return false;
  const bool small = img_.ChunkCount(e) <= 1;
  auto r = RegionFor(e, false);
  if (!r || !r->Test(small ? e.id : c.index)) return false;
  const uint64_t off = (small ? (uint64_t{e.id} << shift_) : c.raw_offset) + from;
  return PreadFull(r->data_fd, out, len, off, r->name).ok();
}

bool NodeCache::NoteStream(const Entry& e) {
  auto r = RegionFor(e, true);
  if (!r) return false;
  std::atomic_ref<uint64_t> streams(*reinterpret_cast<uint64_t*>(r->bits + kBtStreams));
  return streams.fetch_add(1, std::memory_order_acq_rel) > 0;
}

bool NodeCache::HasChunk(const Entry& e, uint64_t i) {
  auto r = RegionFor(e, false);
  return r && r->Test(i);
}

void NodeCache::Offer(const Entry& e, const Chunk& c, const char* data, bool must) {
  const bool small = img_.ChunkCount(e) <= 1;
  auto r = RegionFor(e, true);
  if (!r) return;
  const uint64_t bit = small ? e.id : c.index;
  if (r->Test(bit)) return;
  if (!small) {
    struct stat st;
    if (::fstat(r->data_fd, &st) == 0 && st.st_nlink == 0) {
      // Evicted by another process since we opened it: writing there would fill a file no one else sees.
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = files_.find(e.id); it != files_.end() && it->second.first == r) {
          lru_.erase(it->second.second);
          files_.erase(it);
        }
      }
      r = RegionFor(e, true);
      if (!r || r->Test(bit)) return;
    }
  }
  const uint64_t pages = PageRound(c.raw_size);
  if (!Reserve(pages, must, small ? std::string() : r->name)) return;
  const uint64_t off = small ? (uint64_t{e.id} << shift_) : c.raw_offset;
  if (!PwriteFull(r->data_fd, data, c.raw_size, off)) {
    Used().fetch_sub(pages);
    return;
  }
  if (r->Set(bit)) Used().fetch_sub(pages);  // someone else stored it (and counted it) meanwhile
}

bool NodeCache::Reserve(uint64_t bytes, bool must, const std::string& keep) {
  const uint64_t budget = Load64(state_ + kStBudget);
  uint64_t now = Used().fetch_add(bytes) + bytes;
  if (now <= budget) return true;
  if (!must) {
    Used().fetch_sub(bytes);
    // The count only grows by estimates between recounts: check the real figure now and then.
    Recount();
    now = Used().fetch_add(bytes) + bytes;
    if (now <= budget) return true;
    Used().fetch_sub(bytes);
    return false;
  }
  EvictFor(now - budget, keep);
  return true;  // a kernel fd needs every chunk: over budget until the evicted files' users let go
}

void NodeCache::Recount() {
  auto& last = *reinterpret_cast<std::atomic<uint64_t>*>(state_ + kStLastRecount);
  uint64_t prev = last.load(), now = NowSeconds();
  if (now < prev + 2 || !last.compare_exchange_strong(prev, now)) return;  // at most every 2 s, one process
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  uint64_t total = 0;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n.size() < 5 || n.compare(n.size() - 5, 5, ".data") != 0) continue;
    struct stat st;
    if (::fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
      total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  ::closedir(d);
  Used().store(total);
}

void NodeCache::EvictFor(uint64_t bytes, const std::string& keep) {
  struct Victim {
    std::string name;
    struct timespec mtime;
    uint64_t size;
  };
  std::vector<Victim> v;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n.size() < 6 || n[0] != 'f' || n.compare(n.size() - 5, 5, ".data") != 0) continue;
    std::string base = n.substr(0, n.size() - 5);
    if (base == keep) continue;
    struct stat st;
    if (::fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
      v.push_back({base, st.st_mtim, static_cast<uint64_t>(st.st_blocks) * 512});
  }
  ::closedir(d);
  std::sort(v.begin(), v.end(), [](const Victim& a, const Victim& b) {
    return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
  uint64_t freed = 0;
  for (const Victim& x : v) {
    if (freed >= bytes) break;
    // Bits first: from now on nobody opening by name pairs these bits with a new data file.
    if (::unlink((dir_ + "/" + x.name + ".bits").c_str()) != 0 && errno != ENOENT) continue;
    if (::unlink((dir_ + "/" + x.name + ".data").c_str()) != 0) continue;
    freed += x.size;
    Used().fetch_sub(std::min(x.size, Used().load()));
  }
}

Status NodeCache::WithFileLock(const Entry& e, const std::function<Status()>& fill) {
  auto r = RegionFor(e, true);
  if (!r) return fill();
  while (::flock(r->data_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  Status s = fill();
  ::flock(r->data_fd, LOCK_UN);
  return s;
}

Result<int> NodeCache::OpenComplete(const Entry& e, int flags) {
  auto r = RegionFor(e, true);
  if (!r) return Status(Code::kUnsupported, "no node-chunk-cache file for " + Printable(e.path));
  const uint64_t n = img_.ChunkCount(e);
  for (uint64_t i = 0; i < n; ++i)
    if (!r->Test(i)) return Status(Code::kUnsupported, "not every chunk is in the node chunk cache");
  ::futimens(r->data_fd, nullptr);  // most recently used: the last to be evicted
  // A new open file description of exactly this inode (even if evicted since), read-only, at offset 0.
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", r->data_fd);
  int fd = ::open(proc, O_RDONLY | (flags & O_CLOEXEC));
  if (fd >= 0 && !NamesFile(fd, r->data_st.st_dev, r->data_st.st_ino)) {
    ::close(fd);
    fd = -1;
  }
  if (fd < 0) return Status(Code::kUnsupported, "cannot reopen the node-chunk-cache file of " + Printable(e.path));
  return fd;
}

}  // namespace fanstore
