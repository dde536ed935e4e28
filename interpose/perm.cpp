// Permission checks as Linux makes them (fs/namei.c: acl_permission_check, generic_permission), for a caller that
// is not the file system's: the image's packed modes and owners against this process's ids.
#include "perm.hpp"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "raw_syscall.hpp"
#include "state.hpp"

namespace fanstore::interpose::perm {
namespace {

thread_local bool t_real_ids __attribute__((tls_model("initial-exec"))) = false;

constexpr int kStackGroups = 256;
// Bounds the walk up a crafted index whose parent links form a loop (a real path has at most PATH_MAX / 2 levels).
constexpr int kMaxDepth = 4096;

bool InList(const gid_t* list, long n, gid_t gid) {
  for (long i = 0; i < n; ++i)
    if (list[i] == gid) return true;
  return false;
}

}  // namespace

Caller::Caller() : real_(t_real_ids) {}

uid_t Caller::Uid() {
  if (!have_uid_) {
    uid_ = real_ ? getuid() : geteuid();
    have_uid_ = true;
  }
  return uid_;
}

bool Caller::InGroup(gid_t gid) {
  if (!have_group_ || group_ != gid) {
    in_group_ = LookUpGroup(gid);
    group_ = gid;
    have_group_ = true;
  }
  return in_group_;
}

bool Caller::LookUpGroup(gid_t gid) const {
  if (gid == (real_ ? getgid() : getegid())) return true;
  gid_t local[kStackGroups];
  long n = RawSyscall(SYS_getgroups, kStackGroups, reinterpret_cast<long>(local));
  if (n >= 0) return InList(local, n, gid);
  // More groups than the stack array holds (up to NGROUPS_MAX, 65536): pages of their own, not the heap, so
  // the checks stay allocation-free (exec from a forked child).
  long count = RawSyscall(SYS_getgroups, 0, 0);
  if (count <= 0) return false;
  size_t bytes = static_cast<size_t>(count) * sizeof(gid_t);
  long p =
      RawSyscall(SYS_mmap, 0, static_cast<long>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p < 0 && p >= -4095) return false;
  auto* list = reinterpret_cast<gid_t*>(p);
  n = RawSyscall(SYS_getgroups, count, p);
  bool in = n >= 0 && InList(list, n, gid);
  RawSyscall(SYS_munmap, p, static_cast<long>(bytes));
  return in;
}

RealIdsScope::RealIdsScope(bool real) : prev_(t_real_ids) { t_real_ids = prev_ || real; }
RealIdsScope::~RealIdsScope() { t_real_ids = prev_; }

int Check(uint32_t mode, uint32_t uid, uint32_t gid, int want, Caller& who) {
  want &= 7;
  const uint32_t u = (mode >> 6) & 7, g = (mode >> 3) & 7, o = mode & 7;
  // Every class grants it (0644 for reading, 0755 for executing): the answer is the same for every caller, root
  // included (a non-directory with every x bit is executable by root too), so no id is looked at.
  if ((u & g & o & static_cast<uint32_t>(want)) == static_cast<uint32_t>(want)) return 0;
  const bool dir = S_ISDIR(mode);
  // Executing a non-directory without any x bit: nobody may, not even root.
  if ((want & kExec) && !dir && (mode & 0111) == 0) return EACCES;
  const uid_t me = who.Uid();
  if (me == 0) return 0;  // CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (writing is EROFS before any of this)
  uint32_t bits;
  if (uid == kNoOwner || uid == me) {
    bits = u;  // a version-2 image stores no owner: Client::FillStat reports the caller as owner
  } else if (((g ^ o) & static_cast<uint32_t>(want)) == 0) {
    bits = o;  // group and other agree on what is asked: no group look-up (the kernel skips it too)
  } else {
    bits = (gid == kNoOwner || who.InGroup(gid)) ? g : o;
  }
  return (bits & static_cast<uint32_t>(want)) == static_cast<uint32_t>(want) ? 0 : EACCES;
}

int CheckEntry(const Entry& e, int want, Caller& who) { return Check(e.mode, e.uid, e.gid, want, who); }

int CheckEntry(uint32_t id, int want) {
  Caller who;
  return CheckEntry(g_client->image().Get(id), want, who);
}

int SearchUp(uint32_t dir, Caller& who, uint32_t top) {
  const Image& img = g_client->image();
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const Entry e = img.Get(dir);
    if (!e.is_dir()) return 0;  // a crafted index; lookups report it
    if (CheckEntry(e, kExec, who) != 0) return EACCES;
    if (dir == top || dir == kRootId || e.parent == dir) return 0;
    dir = e.parent;
  }
  return 0;
}

}  // namespace fanstore::interpose::perm
