// Registry of the program's directory streams on the mount's parent, and the entry they gain at their end.
#include "parent_listing.hpp"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>

#include "ancestors.hpp"
#include "fd_table.hpp"
#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose::parent_listing {
namespace {

struct Stream {
  bool injected = false;
  long end_cookie = -1;  // libc's telldir just after the mount's entry was returned
  struct dirent64 ent;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<DIR*, Stream*> live;
};
Registry& R() {
  static Registry* r = new Registry;  // leaked on purpose: streams may be closed from exit-time code
  return *r;
}
std::atomic<int> g_live{0};

Stream* Find(DIR* d) {
  std::lock_guard<std::mutex> lock(R().mu);
  auto it = R().live.find(d);
  return it == R().live.end() ? nullptr : it->second;
}

}  // namespace

void Note(DIR* d) {
  if (d == nullptr || !Ready()) return;
  int fd = FS_REAL(dirfd, d);
  uint32_t raw = FdTable::Raw(fd);
  const int parent = ancestors::MountDepth() - 1;
  if (!FdTable::IsAncestor(raw) || FdTable::AncestorDepth(raw) != parent) return;
  std::string_view name = ancestors::ChildName(parent);
  char buf[NAME_MAX + 1];
  if (name.empty() || name.size() > NAME_MAX) return;
  memcpy(buf, name.data(), name.size());
  buf[name.size()] = '\0';
  struct stat st;
  int saved = errno;
  bool on_disk = FS_REAL(fstatat, fd, buf, &st, AT_SYMLINK_NOFOLLOW) == 0;
  errno = saved;
  if (on_disk) return;  // the real entry is listed by the kernel (a real mount shows the covered one too)
  ReentrancyGuard guard;
  auto* s = new (std::nothrow) Stream;
  if (s == nullptr) return;
  // As readdir would fill it: the name, DT_DIR, the image root's inode.
  Entry root = g_client->image().Get(kRootId);
  s->ent.d_ino = root.ino ? root.ino : 1;
  s->ent.d_type = DT_DIR;
  memcpy(s->ent.d_name, buf, name.size() + 1);
  size_t len = offsetof(struct dirent64, d_name) + name.size() + 1;
  s->ent.d_reclen = static_cast<unsigned short>((len + 7) & ~size_t{7});
  s->ent.d_off = 0;
  try {
    std::lock_guard<std::mutex> lock(R().mu);
    Stream*& slot = R().live[d];
    delete slot;  // a stale one: the DIR* was freed by a closedir we did not see (fdopendir + raw close)
    slot = s;
  } catch (...) {
    delete s;
    return;
  }
  g_live.fetch_add(1, std::memory_order_release);
}

void Forget(DIR* d) {
  if (!Any()) return;
  Stream* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(R().mu);
    auto it = R().live.find(d);
    if (it == R().live.end()) return;
    s = it->second;
    R().live.erase(it);
  }
  g_live.fetch_sub(1, std::memory_order_release);
  delete s;
}

bool Any() { return g_live.load(std::memory_order_acquire) != 0; }

struct dirent64* Next(DIR* d, bool* noted) {
  Stream* s = Find(d);
  *noted = s != nullptr;
  if (s == nullptr) return nullptr;
  int saved = errno;
  errno = 0;
  struct dirent64* e = FS_REAL(readdir64, d);
  if (e != nullptr || errno != 0) {
    if (e != nullptr) errno = saved;
    return e;
  }
  errno = saved;
  if (s->injected) return nullptr;
  s->injected = true;
  s->end_cookie = FS_REAL(telldir, d);
  errno = saved;
  return &s->ent;
}

void Rewound(DIR* d) {
  if (Stream* s = Find(d)) s->injected = false;
}

void Sought(DIR* d, long loc) {
  if (Stream* s = Find(d)) s->injected = s->injected && loc == s->end_cookie;
}

void LockForFork() { R().mu.lock(); }
void UnlockForFork() { R().mu.unlock(); }

}  // namespace fanstore::interpose::parent_listing
