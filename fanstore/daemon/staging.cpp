// Staging's set-up: plan, lock, space check, the index copy (temp name + rename), the partitions' files.
#include "staging.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "fanstore/image.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "log.hpp"
#include "placement.hpp"

namespace fanstore::daemon {
namespace {

std::string HumanBytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

Result<struct stat> Stat(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  return st;
}

// A temporary copy of `dst` next to it, recorded in `staged` (so --cleanup removes it), with its source's permission
// bits `mode` whatever the umask (a 0600 image stays 0600 on the node).
Result<int> CreateTemp(const std::string& dst, int flags, mode_t mode, StagedFiles* staged, std::string* tmp) {
  *tmp = dst + ".tmp." + std::to_string(getpid());
  staged->BeginTemp(*tmp);
  int fd = open(tmp->c_str(), flags | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  Status s = fd < 0 ? Status::FromErrno(errno, "create " + *tmp) : Status::Ok();
  if (s.ok() && fchmod(fd, mode) != 0) s = Status::FromErrno(errno, "chmod " + *tmp);
  if (s.ok()) return fd;
  if (fd >= 0) close(fd);
  staged->AbortTemp(*tmp);
  return s;
}

// Whether `path` is a FanStore index (its magic), not merely a file of that name.
bool HoldsIndex(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char magic[sizeof format::kIndexMagic];
  const bool is = pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
                  std::memcmp(magic, format::kIndexMagic, sizeof magic) == 0;
  close(fd);
  return is;
}

// Whether `name` is one of the temporary files a daemon stages through: index.fsi, the marker or a partition's file,
// then ".tmp." and a process id.
bool IsStagingTemp(const std::string& name) {
  const size_t dot = name.rfind(".tmp.");
  if (dot == std::string::npos || dot + 5 == name.size() ||
      name.find_first_not_of("0123456789", dot + 5) != std::string::npos)
    return false;
  const std::string base = name.substr(0, dot);
  if (base == format::kIndexName || base == kStagedMarker || base == "part-rep.fsp") return true;
  // part-NNNNN.fsp: five digits or more (PartitionFileName's %05u)
  return base.size() >= 14 && base.compare(0, 5, "part-") == 0 && base.compare(base.size() - 4, 4, ".fsp") == 0 &&
         base.find_first_not_of("0123456789", 5) == base.size() - 4;
}

// Removes the half-written files of runs that died before they could (SIGKILL, a second signal to mpirun, a failed
// start): the caller holds the directory's lock, so no live daemon is writing them. Each holds its full size.
void RemoveStaleTemps(int dir_fd, const std::string& local_dir) {
  const int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup_fd < 0 ? nullptr : fdopendir(dup_fd);
  if (d == nullptr) {
    if (dup_fd >= 0) close(dup_fd);
    return;
  }
  rewinddir(d);  // the copy shares the lock fd's position
  int removed = 0;
  uint64_t bytes = 0;
  while (struct dirent* e = readdir(d)) {
    struct stat st;
    if (!IsStagingTemp(e->d_name) || fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || unlinkat(dir_fd, e->d_name, 0) != 0)
      continue;
    ++removed;
    bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  closedir(d);
  if (removed > 0)
    Info("removed %d half-written file(s) (%s) that an earlier run left in %s", removed, HumanBytes(bytes).c_str(),
         local_dir.c_str());
}

}  // namespace

Result<StagePlan> PlanStaging(const std::string& image_dir, int rank, int nranks, int replicas) {
  auto img = Image::Open(image_dir);
  if (!img.ok()) return img.status();
  ImageSummary sum = (*img)->Summary();
  StagePlan plan;
  plan.content_key = (*img)->ContentKey();
  plan.regular_parts = sum.parts;
  plan.replicated_part = sum.replicated_part;
  for (uint32_t p = 0; p < (*img)->PartitionCount(); ++p) {
    plan.sources.push_back((*img)->PartitionPath(p));  // opened from the image directory: a file there
    if (!Holds(rank, p, sum.replicated_part, nranks, replicas)) continue;
    auto st = Stat(plan.sources.back());
    if (!st.ok()) return st.status();
    plan.parts.push_back(p);
    plan.sizes.push_back(static_cast<uint64_t>(st->st_size));
    plan.modes.push_back(st->st_mode & 07777);
    plan.bytes += plan.sizes.back();
  }
  auto ist = Stat(image_dir + "/" + format::kIndexName);
  if (!ist.ok()) return ist.status();
  plan.index_bytes = static_cast<uint64_t>(ist->st_size);
  plan.bytes += plan.index_bytes;
  return plan;
}

Result<int> LockLocal(const std::string& image_dir, const std::string& local_dir, StagedFiles* staged) {
  struct stat ist;
  if (stat(image_dir.c_str(), &ist) != 0) return Status::FromErrno(errno, "stat " + image_dir);
  // A new staging directory gets the image directory's permissions (so does each staged file).
  bool created = false;
  if (mkdir(local_dir.c_str(), ist.st_mode & 0777) == 0) {
    created = true;
    if (chmod(local_dir.c_str(), ist.st_mode & 07777) != 0) {
      int err = errno;
      rmdir(local_dir.c_str());
      return Status::FromErrno(err, "chmod " + local_dir);
    }
  } else if (errno == ENOENT) {
    return Status(Code::kNotFound, "--local " + local_dir +
                                       ": its parent directory does not exist (serve makes only "
                                       "the last component): create the parent, or give --local on an existing path");
  } else if (errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir " + local_dir);
  }
  int fd = open(local_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR) return Status(Code::kNotDirectory, "--local " + local_dir + " exists and is not a directory");
    return Status::FromErrno(errno, "open " + local_dir);
  }
  // The image directory itself, by whatever path (a symlink, a bind mount): staging would copy every partition
  // over itself, and --cleanup would then delete the image.
  struct stat lst;
  if (fstat(fd, &lst) == 0 && lst.st_dev == ist.st_dev && lst.st_ino == ist.st_ino) {
    close(fd);
    return Status(Code::kInvalidArgument, "--local " + local_dir + " is the image directory " + image_dir +
                                              ": give each node a staging directory of its own, e.g. "
                                              "--local /tmp/fanstore-{rank}");
  }
  staged->SetDirectory(local_dir, created);
  // flock on the directory itself: nothing is written to take it, and it goes away with the process.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK)
      return Status(Code::kExists,
                    "--local " + local_dir +
                        " is in use by another `fanstore serve` (stop it, or give "
                        "each job and each rank of a node its own directory, e.g. --local /nvme/job{rank})");
    return Status::FromErrno(err, "lock " + local_dir);
  }
  // Another image's directory (a copy on the shared file system, say): staging would rename this image's files
  // over its own, and --cleanup then delete them. A directory a daemon staged into carries kStagedMarker; other
  // files that merely have our names are replaced, as before.
  const std::string marker = local_dir + "/" + kStagedMarker;
  if (HoldsIndex(local_dir + "/" + format::kIndexName) && access(marker.c_str(), F_OK) != 0) {
    close(fd);
    return Status(Code::kExists, "--local " + local_dir + " holds an image (" + format::kIndexName +
                                     ") that no `fanstore serve` staged there: staging would overwrite it; give an "
                                     "empty directory, or one a daemon staged into, e.g. --local /tmp/fanstore-{rank}");
  }
  RemoveStaleTemps(fd, local_dir);
  std::string tmp;
  auto out = CreateTemp(marker, O_WRONLY, 0644, staged, &tmp);
  Status s = out.ok() ? Status::Ok() : out.status();
  if (out.ok()) close(*out);
  if (s.ok()) s = staged->Commit(tmp, marker);
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

Status CheckSpace(const std::string& local_dir, const StagePlan& plan, uint64_t reserve_bytes) {
  // A node that cannot hold its share must fail before copying anything, with the numbers.
  struct statvfs vfs;
  if (statvfs(local_dir.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + local_dir);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t avail = free_bytes > reserve_bytes ? free_bytes - reserve_bytes : 0;
  uint64_t need = plan.index_bytes;
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    need += plan.sizes[i];
    if (need > avail)
      return Status(
          Code::kNoSpace,
          "not enough space in " + local_dir + " for partition " +
              format::PartitionFileName(plan.parts[i], plan.regular_parts) + ": this rank needs " +
              std::to_string(plan.bytes) + " bytes (" + HumanBytes(plan.bytes) + ") for " +
              std::to_string(plan.parts.size()) + " partitions + index, " + std::to_string(free_bytes) + " bytes free" +
              (reserve_bytes ? " of which --reserve keeps " + std::to_string(reserve_bytes) : std::string()) +
              ": free space there, give --local on a larger disk" + (reserve_bytes ? ", lower --reserve" : "") +
              ", or run on more nodes (each rank then keeps fewer partitions)");
  }
  return Status::Ok();
}

Status StageIndex(const std::string& image_dir, const std::string& local_dir, StagedFiles* staged) {
  const std::string src = image_dir + "/" + format::kIndexName, dst = local_dir + "/" + format::kIndexName;
  struct stat sst;
  if (stat(src.c_str(), &sst) != 0) return Status::FromErrno(errno, "stat " + src);
  std::string tmp;
  auto out = CreateTemp(dst, O_WRONLY, sst.st_mode & 07777, staged, &tmp);
  if (!out.ok()) return out.status();
  Status s = CopyIndexFile(src, *out);
  if (close(*out) != 0 && s.ok()) s = Status::FromErrno(errno, "close " + tmp);
  if (!s.ok()) {
    staged->AbortTemp(tmp);
    return s;
  }
  return staged->Commit(tmp, dst);
}

Result<std::vector<StagedPart>> PrepareParts(const Image& index, const StagePlan& plan, uint64_t piece_bytes,
                                             StagedFiles* staged, StagedReader* reader) {
  auto layouts = CutPartitions(index, plan.parts, plan.sizes, piece_bytes);
  if (!layouts.ok()) return layouts.status();
  std::vector<StagedPart> out;
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    const uint32_t p = plan.parts[i];
    StagedPart sp;
    sp.layout = std::move((*layouts)[i]);
    sp.final_path = index.PartitionPath(p);
    auto wfd = CreateTemp(sp.final_path, O_RDWR, plan.modes[i], staged, &sp.tmp);
    if (!wfd.ok()) return wfd.status();
    sp.wfd = *wfd;
    // Its space is taken now, so a node that runs out does so here and not halfway.
    Status s;
    if (sp.layout.size > 0) {
      int rc = posix_fallocate(sp.wfd, 0, static_cast<off_t>(sp.layout.size));
      if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(sp.wfd, static_cast<off_t>(sp.layout.size)) ? errno : 0;
      if (rc != 0) s = Status::FromErrno(rc, "allocate " + std::to_string(sp.layout.size) + " bytes for " + sp.tmp);
    }
    int rfd = s.ok() ? open(sp.tmp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (s.ok() && rfd < 0) s = Status::FromErrno(errno, "open " + sp.tmp);
    if (!s.ok()) {
      close(sp.wfd);
      staged->AbortTemp(sp.tmp);
      return s;
    }
    reader->Begin(p, rfd, sp.final_path, sp.layout.size, sp.layout.piece_ends);
    out.push_back(std::move(sp));
  }
  return out;
}

}  // namespace fanstore::daemon
