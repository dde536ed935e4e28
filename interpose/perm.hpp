// Permission checks for the entries the interposer answers from the image, decided as Linux decides them.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "fanstore/image.hpp"

namespace fanstore::interpose::perm {

inline constexpr int kRead = 4;  // the rwx bits of one class: MAY_READ, MAY_WRITE, MAY_EXEC
inline constexpr int kWrite = 2;
inline constexpr int kExec = 1;

// The ids a check runs with, read only when a mode needs them (most do not: 0644 grants reading, 0755 searching,
// to everyone): the uid at most once per Caller, the groups once per owning group asked about in a row. Effective ids
// by default; real ids while a RealIdsScope is alive (access(2), faccessat without AT_EACCESS: the kernel swaps its
// credentials for the whole call, path walk included). Never allocates: the supplementary groups go to a stack array,
// or, past 256 of them, to pages mapped for the call.
class Caller {
 public:
  Caller();
  uid_t Uid();
  // Whether gid is the caller's (real or effective) group or one of its supplementary groups.
  bool InGroup(gid_t gid);

 private:
  bool LookUpGroup(gid_t gid) const;
  bool real_;
  bool have_uid_ = false;
  uid_t uid_ = 0;
  bool have_group_ = false;  // the last group asked about: a path's directories mostly share one
  gid_t group_ = 0;
  bool in_group_ = false;
};

// Makes the checks on this thread use the real ids until it ends, when `real` (nests).
class RealIdsScope {
 public:
  explicit RealIdsScope(bool real = true);
  ~RealIdsScope();
  RealIdsScope(const RealIdsScope&) = delete;
  RealIdsScope& operator=(const RealIdsScope&) = delete;

 private:
  bool prev_;
};

// Linux's generic_permission on mode bits (no ACLs): the owner class when the caller's uid is the owner's
// (kNoOwner, a version-2 image, counts as the caller), else the group class when the owning group is one of the
// caller's groups (looked up only when the group and other bits differ in `want`), else other. uid 0 may read
// and search anything and execute a non-directory that has any x bit. `want`: kRead|kWrite|kExec. 0 or EACCES.
int Check(uint32_t mode, uint32_t uid, uint32_t gid, int want, Caller& who);
int CheckEntry(const Entry& e, int want, Caller& who);
int CheckEntry(uint32_t id, int want);

// Search (x) permission on directory `dir` and each directory above it, up to the image root or `top`
// (inclusive), as the kernel's path walk asks it of every directory a path passes through. 0 or EACCES.
inline constexpr uint32_t kNoTop = 0xFFFFFFFFu;
int SearchUp(uint32_t dir, Caller& who, uint32_t top = kNoTop);

}  // namespace fanstore::interpose::perm
