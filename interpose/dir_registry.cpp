// Registry of our DIR*s and the readdir cursor over an image directory's precomputed listing.
#include "dir_registry.hpp"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_set>

#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose::dirs {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_set<void*> live;
};
Registry& R() {
  static Registry* r = new Registry;  // leaked on purpose: DIRs may be closed from exit-time destructors
  return *r;
}
std::atomic<int> g_live{0};

// The inode of the mount's parent directory, for ".." of the image root (0 when it does not exist).
uint64_t MountParentIno() {
  static std::atomic<uint64_t> cached{UINT64_MAX};
  uint64_t v = cached.load(std::memory_order_relaxed);
  if (v != UINT64_MAX) return v;
  std::string parent(g_mount, g_mount_len);
  size_t slash = parent.rfind('/');
  parent.resize(slash == 0 ? 1 : slash);
  struct stat st;
  v = FS_REAL(stat, parent.c_str(), &st) == 0 ? st.st_ino : 0;
  cached.store(v, std::memory_order_relaxed);
  return v;
}

void Fill(struct dirent64* out, uint64_t ino, long next, unsigned char type, std::string_view name) {
  size_t n = name.size() < sizeof out->d_name - 1 ? name.size() : sizeof out->d_name - 1;
  out->d_ino = ino;
  out->d_off = next;
  out->d_type = type;
  memcpy(out->d_name, name.data(), n);
  out->d_name[n] = '\0';
  size_t len = offsetof(struct dirent64, d_name) + n + 1;
  out->d_reclen = static_cast<unsigned short>((len + 7) & ~size_t{7});
}

}  // namespace

OurDir* Create(int fd, uint32_t id) {
  OurDir* d = new (std::nothrow) OurDir;
  if (d == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  d->fd = fd;
  d->id = id;
  try {
    std::lock_guard<std::mutex> lock(R().mu);
    R().live.insert(d);
  } catch (...) {
    delete d;
    errno = ENOMEM;
    return nullptr;
  }
  g_live.fetch_add(1, std::memory_order_release);
  return d;
}

OurDir* Find(void* d) {
  if (d == nullptr || g_live.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(R().mu);
  return R().live.count(d) ? static_cast<OurDir*>(d) : nullptr;
}

void Destroy(OurDir* d) {
  {
    std::lock_guard<std::mutex> lock(R().mu);
    R().live.erase(d);
  }
  g_live.fetch_sub(1, std::memory_order_release);
  delete d;
}

bool Next(OurDir* d, struct dirent64* out) {
  const Image& img = g_client->image();
  Entry self = img.Get(d->id);
  uint32_t n = img.ChildCount(d->id);
  long pos = d->pos;
  if (pos < 0 || pos >= 2 + static_cast<long>(n)) return false;
  if (pos == 0) {
    Fill(out, self.ino, 1, DT_DIR, ".");
  } else if (pos == 1) {
    uint64_t ino = d->id == kRootId ? MountParentIno() : img.Get(self.parent).ino;
    Fill(out, ino ? ino : self.ino, 2, DT_DIR, "..");
  } else {
    Entry c = img.Get(img.Child(d->id, static_cast<uint32_t>(pos - 2)));
    Fill(out, c.ino, pos + 1, c.d_type(), c.name);
  }
  d->pos = pos + 1;
  return true;
}

void LockForFork() { R().mu.lock(); }
void UnlockForFork() { R().mu.unlock(); }

}  // namespace fanstore::interpose::dirs
