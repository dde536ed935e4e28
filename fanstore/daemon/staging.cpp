// Staging of partitions to node-local storage: plan, space check, copy (temp name + rename), verify.
#include "staging.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "fanstore/image.hpp"
#include "format.hpp"
#include "placement.hpp"

namespace fanstore::daemon {
namespace {

std::string Base(const std::string& path) {
  size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

std::string HumanBytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

Result<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

Status Interrupted() { return Status(Code::kIoError, "staging interrupted by a signal"); }

// Copies src to dst via a temporary name in dst's directory, so a half-copied file never has the final name.
// The copy gets the source's permission bits (a 0600 image stays 0600 on the node), whatever the umask.
Status CopyFile(const std::string& src, const std::string& dst, const std::function<bool()>& cancelled,
                StagedFiles* staged) {
  int in = open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::FromErrno(errno, "open " + src);
  struct stat sst;
  if (fstat(in, &sst) != 0) {
    int err = errno;
    close(in);
    return Status::FromErrno(err, "stat " + src);
  }
  std::string tmp = dst + ".tmp." + std::to_string(getpid());
  staged->BeginTemp(tmp);
  int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    staged->AbortTemp(tmp);
    return Status::FromErrno(err, "create " + tmp);
  }
  Status s;
  if (fchmod(out, sst.st_mode & 07777) != 0) s = Status::FromErrno(errno, "chmod " + tmp);
  bool use_cfr = true;  // copy_file_range stays in the kernel; fall back to read/write across file systems
  std::unique_ptr<char[]> buf;
  for (; s.ok();) {
    if (cancelled && cancelled()) {
      s = Interrupted();
      break;
    }
    ssize_t n;
    if (use_cfr) {
      n = copy_file_range(in, nullptr, out, nullptr, 64 << 20, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        use_cfr = false;
        continue;
      }
    } else {
      if (!buf) buf.reset(new char[8 << 20]);
      n = read(in, buf.get(), 8 << 20);
      for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(out, buf.get() + off, static_cast<size_t>(n - off));
        if (w < 0) {
          if (errno == EINTR) continue;
          n = -1;
          break;
        }
        off += w;
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      s = Status::FromErrno(errno, "copy " + src + " -> " + tmp);
      break;
    }
    if (n == 0) break;
  }
  close(in);
  if (close(out) != 0 && s.ok()) s = Status::FromErrno(errno, "close " + tmp);
  if (!s.ok()) {
    staged->AbortTemp(tmp);
    return s;
  }
  return staged->Commit(tmp, dst);
}

// Decodes and checksums every file of the staged partitions `parts` (threads share the work by entry id).
Status VerifyStaged(const std::string& local_dir, const StagePlan& plan, const std::function<bool()>& cancelled) {
  ImageOpenOptions io;
  io.partition_dir = local_dir;
  auto img = Image::Open(local_dir, io);
  if (!img.ok()) return img.status();
  const Image& im = **img;
  std::vector<bool> mine(im.PartitionCount(), false);
  for (uint32_t p : plan.parts) {
    if (p >= mine.size()) return Status(Code::kCorrupt, "staged index has no partition " + std::to_string(p));
    if (!im.HasPartition(p)) return Status(Code::kIoError, "staged partition " + im.PartitionPath(p) + " is unreadable");
    mine[p] = true;
  }
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first_bad;
  auto work = [&] {
    std::vector<char> buf;
    for (uint64_t id; (id = next.fetch_add(1)) < im.size();) {
      {
        std::lock_guard<std::mutex> g(mu);
        if (!first_bad.ok()) return;
        if (cancelled && cancelled()) {
          first_bad = Interrupted();
          return;
        }
      }
      Entry e = im.Get(static_cast<uint32_t>(id));
      if (!e.is_reg() || e.part >= mine.size() || !mine[e.part]) continue;
      buf.resize(e.size ? e.size : 1);
      Status s = im.ReadFile(e.id, buf.data());
      if (!s.ok()) {
        std::lock_guard<std::mutex> g(mu);
        if (first_bad.ok()) first_bad = Status(s.code(), "verifying staged copy: " + s.message());
        return;
      }
    }
  };
  unsigned n = std::thread::hardware_concurrency();
  n = n == 0 ? 1 : (n > 8 ? 8 : n);
  std::vector<std::thread> ts;
  for (unsigned i = 1; i < n; ++i) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
  return first_bad;
}

}  // namespace

Result<StagePlan> PlanStaging(const std::string& image_dir, int rank, int nranks, int replicas) {
  auto img = Image::Open(image_dir);
  if (!img.ok()) return img.status();
  ImageSummary sum = (*img)->Summary();
  StagePlan plan;
  plan.regular_parts = sum.parts;
  plan.replicated_part = sum.replicated_part;
  for (uint32_t p = 0; p < (*img)->PartitionCount(); ++p) {
    if (!Holds(rank, p, sum.replicated_part, nranks, replicas)) continue;
    auto sz = FileSize((*img)->PartitionPath(p));
    if (!sz.ok()) return sz.status();
    plan.parts.push_back(p);
    plan.bytes += *sz;
  }
  auto isz = FileSize(image_dir + "/" + format::kIndexName);
  if (!isz.ok()) return isz.status();
  plan.bytes += *isz;
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
      return Status(Code::kExists, "--local " + local_dir + " is in use by another `fanstore serve` (stop it, or give "
                                   "each job and each rank of a node its own directory, e.g. --local /nvme/job{rank})");
    return Status::FromErrno(err, "lock " + local_dir);
  }
  return fd;
}

Status Stage(const std::string& image_dir, const std::string& local_dir, const StagePlan& plan, uint64_t reserve_bytes,
             const std::function<void(const char* line)>& progress, const std::function<bool()>& cancelled,
             StagedFiles* staged) {
  struct stat dst;
  if (stat(local_dir.c_str(), &dst) != 0) return Status::FromErrno(errno, "stat " + local_dir);
  if (!S_ISDIR(dst.st_mode)) return Status(Code::kNotDirectory, "--local " + local_dir + " exists and is not a directory");
  auto img = Image::Open(image_dir);
  if (!img.ok()) return img.status();
  const Image& src = **img;

  // Space first: a node that cannot hold its share must fail before copying anything, with the numbers.
  struct statvfs vfs;
  if (statvfs(local_dir.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + local_dir);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t avail = free_bytes > reserve_bytes ? free_bytes - reserve_bytes : 0;
  auto isz = FileSize(image_dir + "/" + format::kIndexName);
  if (!isz.ok()) return isz.status();
  uint64_t need = *isz;
  for (uint32_t p : plan.parts) {
    auto sz = FileSize(src.PartitionPath(p));
    if (!sz.ok()) return sz.status();
    need += *sz;
    if (need > avail)
      return Status(Code::kNoSpace, "not enough space in " + local_dir + " for partition " + Base(src.PartitionPath(p)) +
                                        ": this rank needs " + std::to_string(plan.bytes) + " bytes (" +
                                        HumanBytes(plan.bytes) + ") for " + std::to_string(plan.parts.size()) +
                                        " partitions + index, " + std::to_string(free_bytes) + " bytes free" +
                                        (reserve_bytes ? " of which --reserve keeps " + std::to_string(reserve_bytes)
                                                       : std::string()));
  }

  auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0;
  char line[512];
  Status s = CopyFile(image_dir + "/" + format::kIndexName, local_dir + "/" + format::kIndexName, cancelled, staged);
  if (!s.ok()) return s;
  done += *isz;
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    if (cancelled && cancelled()) return Interrupted();
    std::string from = src.PartitionPath(plan.parts[i]);
    s = CopyFile(from, local_dir + "/" + Base(from), cancelled, staged);
    if (!s.ok()) return s;
    auto sz = FileSize(from);
    done += sz.ok() ? *sz : 0;
    if (progress) {
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::snprintf(line, sizeof line, "staged %zu/%zu partitions, %s of %s (%.0f MiB/s)", i + 1, plan.parts.size(),
                    HumanBytes(done).c_str(), HumanBytes(plan.bytes).c_str(),
                    sec > 0 ? done / sec / (1 << 20) : 0.0);
      progress(line);
    }
  }
  s = VerifyStaged(local_dir, plan, cancelled);
  if (s.ok() && progress) {
    std::snprintf(line, sizeof line, "verified every file of %zu staged partitions", plan.parts.size());
    progress(line);
  }
  return s;
}

}  // namespace fanstore::daemon
