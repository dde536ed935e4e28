// Decoded-file storage and its LRU cache (see decoded_cache.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

#include "decoded_cache.hpp"

namespace fanstore {
namespace {

class HeapBytes final : public DecodedBytes {
 public:
  explicit HeapBytes(uint64_t n) : buf_(n ? new char[n] : nullptr), n_(n) {}
  const char* data() const override { return buf_.get(); }
  uint64_t size() const override { return n_; }
  char* writable() { return buf_.get(); }

 private:
  std::unique_ptr<char[]> buf_;
  uint64_t n_;
};

// Large files get their own mapping so freeing them returns memory to the OS at once.
class MappedBytes final : public DecodedBytes {
 public:
  MappedBytes(void* p, uint64_t n) : p_(p), n_(n) {}
  ~MappedBytes() override { munmap(p_, n_); }
  const char* data() const override { return static_cast<const char*>(p_); }
  uint64_t size() const override { return n_; }

 private:
  void* p_;
  uint64_t n_;
};

// Decoded straight into a memfd: the mapping serves data() (FUSE, CLI) and the fd serves OpenFd
// (read-only reopens through /proc/self/fd), so a file is copied once however often it is opened.
class MemfdBytes final : public DecodedBytes {
 public:
  MemfdBytes(int fd, void* p, uint64_t n) : p_(p), n_(n) {
    struct stat st;
    id_.fd = fd;
    if (fstat(fd, &st) == 0) {
      id_.dev = st.st_dev;
      id_.ino = st.st_ino;
    }
  }
  ~MemfdBytes() override {
    if (p_) munmap(p_, n_);
    // Close only what is still our memfd: the program may have dup2'ed its own file onto the number.
    struct stat st;
    if (fstat(id_.fd, &st) == 0 && st.st_dev == id_.dev && st.st_ino == id_.ino) close(id_.fd);
  }
  const char* data() const override { return static_cast<const char*>(p_); }
  uint64_t size() const override { return n_; }
  Memfd memfd() const override { return id_; }
  // Swaps the writable mapping for a read-only one and seals the memfd against writes, so no one
  // (e.g. an open("/proc/self/fd/N", O_RDWR)) can change a cached file after its checksum held.
  // Seal before remapping: the kernel refuses F_SEAL_WRITE while any shared mapping of the fd could
  // become writable. A private read-only mapping of a write-sealed file sees its pages, uncopied.
  bool Freeze() override {
    munmap(p_, n_);
    p_ = nullptr;
    if (fcntl(id_.fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SEAL) != 0) return false;
    void* p = mmap(nullptr, n_, PROT_READ, MAP_PRIVATE, id_.fd, 0);
    if (p == MAP_FAILED) return false;
    p_ = p;
    return true;
  }

 private:
  void* p_;
  uint64_t n_;
  Memfd id_;
};

std::unique_ptr<DecodedBytes> AllocateMemfd(uint64_t size, char** writable, void (*internal_fd_hook)(int)) {
  int fd = memfd_create("fanstore", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return nullptr;
  }
  // The size is final: no one (not even a bug of ours) can grow or shrink what readers see.
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  // MAP_POPULATE: one kernel call allocates every page instead of a fault per 4 KiB while decoding.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  // A fork while we decode must not give the child a writable mapping: it would make our
  // F_SEAL_WRITE fail with EBUSY (and the child has no use for half-decoded bytes).
  madvise(p, size, MADV_DONTFORK);
  if (internal_fd_hook) internal_fd_hook(fd);
  *writable = static_cast<char*>(p);
  return std::make_unique<MemfdBytes>(fd, p, size);
}

constexpr uint64_t kMmapThreshold = 1ull << 20;

// Bytes that live in the partition file's page cache: nothing copied, nothing allocated.
class PartitionBytes final : public FileBytes {
 public:
  PartitionBytes(const Image::Mapping& m, uint64_t n) : m_(m), n_(n) {}
  ~PartitionBytes() override { munmap(m_.base, m_.length); }
  const char* data() const override { return m_.data; }
  uint64_t size() const override { return n_; }

 private:
  Image::Mapping m_;
  uint64_t n_;
};

}  // namespace

std::unique_ptr<FileBytes> WrapPartitionMapping(const Image::Mapping& m, uint64_t size) {
  return std::make_unique<PartitionBytes>(m, size);
}

std::unique_ptr<DecodedBytes> AllocateFileBytes(uint64_t size, char** writable, void (*internal_fd_hook)(int)) {
  if (size >= kMemfdThreshold) {
    if (auto m = AllocateMemfd(size, writable, internal_fd_hook)) return m;
  }
  if (size >= kMmapThreshold) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    *writable = static_cast<char*>(p);
    return std::make_unique<MappedBytes>(p, size);
  }
  auto h = std::unique_ptr<HeapBytes>(new (std::nothrow) HeapBytes(size));
  if (!h) return nullptr;
  *writable = h->writable();
  return h;
}

std::shared_ptr<const FileBytes> DecodedCache::Get(uint32_t id) {
  if (budget_ == 0) return nullptr;
  std::lock_guard<std::mutex> g(mu_);
  auto it = map_.find(id);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void DecodedCache::Put(uint32_t id, std::shared_ptr<const FileBytes> bytes) {
  uint64_t n = bytes->size();
  if (budget_ == 0 || n > budget_ / 2) return;
  const bool holds_fd = bytes->memfd().fd >= 0;
  if (holds_fd && max_fds_ == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  if (map_.count(id)) return;
  lru_.emplace_front(id, std::move(bytes));
  map_[id] = lru_.begin();
  used_ += n;
  fds_ += holds_fd;
  auto evict = [this](Lru::iterator it) {
    used_ -= it->second->size();
    fds_ -= it->second->memfd().fd >= 0;
    map_.erase(it->first);
    lru_.erase(it);
  };
  while (used_ > budget_ && !lru_.empty()) evict(std::prev(lru_.end()));
  // Over the fd cap: drop the least recently used entries that hold an fd (heap entries hold none).
  auto it = lru_.end();
  while (fds_ > max_fds_ && it != lru_.begin()) {
    auto prev = std::prev(it);
    if (prev->second->memfd().fd >= 0)
      evict(prev);  // `it` stays valid: list erase invalidates only the erased node
    else
      it = prev;
  }
}

}  // namespace fanstore
