// ImageDirReader: pread of the image directory's partition files, paced by a virtual clock at the cap.
#include "image_dir_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <new>
#include <thread>

#include "fanstore/protocol/payload_memfd.hpp"

namespace fanstore::daemon {

using daemon_proto::NowUs;

ImageDirReader::ImageDirReader(std::vector<std::string> paths, uint64_t bytes_per_s)
    : paths_(std::move(paths)), fds_(paths_.size(), -1), rate_(bytes_per_s) {}

ImageDirReader::~ImageDirReader() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

int64_t ImageDirReader::Book(uint64_t n) {
  if (rate_ == 0) return 0;
  std::lock_guard<std::mutex> g(mu_);
  // A budget unused for a while is not saved up beyond a tenth of a second's worth.
  const int64_t start = std::max(next_free_us_, NowUs() - 100000);
  next_free_us_ = start + SlotUs(n);
  return next_free_us_;  // the bytes go once their slot is paid for: the first piece too waits its share
}

void ImageDirReader::Unbook(uint64_t n) {
  if (rate_ == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  next_free_us_ -= SlotUs(n);
}

Status ReadFullAt(int fd, char* dst, uint64_t n, uint64_t offset, const std::string& name, const char* why_short) {
  while (n > 0) {
    const ssize_t r = pread(fd, dst, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status(Code::kIoError, "read " + Printable(name) + ": " + std::strerror(errno));
    if (r == 0) return Status(Code::kIoError, name + " ends at byte " + std::to_string(offset) + ": " + why_short);
    dst += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status ImageDirReader::Read(uint32_t part, uint64_t offset, uint64_t n, char* dst, std::atomic<uint64_t>* counted) {
  if (part >= paths_.size()) return Status(Code::kInvalidArgument, "no partition " + std::to_string(part));
  int fd;
  {
    std::lock_guard<std::mutex> g(mu_);
    fd = fds_[part];
  }
  if (fd < 0) {
    // Opened outside the lock: an open that hangs in a hung file system must not hold up the other reads.
    fd = open(paths_[part].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      // A partition gone from the image directory (deleted, renamed, a vanished NFS file) is an I/O error of the
      // read that needed it, never ENOENT of a file the reader sees; the same words as the client's.
      const int err = errno;
      if (err == ENOENT)
        return Status(Code::kIoError, "partition " + Printable(paths_[part]) +
                                          " is missing from the image directory: copy it back next to the index");
      return Status(Code::kIoError, "cannot open partition " + Printable(paths_[part]) + ": " + std::strerror(err));
    }
    // No read-ahead: each piece is read whole by one rank, and the next one by another, so whatever the kernel
    // read past a piece's end would be read from the shared file system for nothing.
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    std::lock_guard<std::mutex> g(mu_);
    if (fds_[part] < 0) {
      fds_[part] = fd;
    } else {  // another thread opened it meanwhile
      close(fd);
      fd = fds_[part];
    }
  }
  Status s = ReadFullAt(fd, dst, n, offset, paths_[part], "the image is truncated (copy the image again or re-pack)");
  if (s.ok()) counted->fetch_add(n, std::memory_order_relaxed);
  return s;
}

Status ImageDirReader::ReadForStaging(uint32_t part, uint64_t offset, uint64_t n, char* dst,
                                      const std::function<bool()>& cancelled, bool at_once, bool* interrupted) {
  // Paced before the read: the bytes go once the budget has room for them.
  const int64_t due = Book(n);
  for (int64_t now; !at_once && (now = NowUs()) < due;) {
    if (cancelled && cancelled()) {
      Unbook(n);
      if (interrupted) *interrupted = true;
      return Status(Code::kIoError, "staging interrupted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(due - now, 20000)));
  }
  return Read(part, offset, n, dst, &staging_bytes_);
}

Status ImageDirReader::ReadNow(uint32_t part, uint64_t offset, uint64_t n, char* dst) {
  Book(n);
  return Read(part, offset, n, dst, &reader_bytes_);
}

// What the reading threads share with ImageDirReads; each thread holds it (and so the ImageDirReader) for as long
// as it runs, which may be past the daemon's end for one stuck in a read.
struct ImageDirReads::Shared {
  struct Job {
    uint64_t id = 0;
    uint32_t part = 0;
    uint64_t offset = 0, n = 0;
    int64_t deadline_us = 0;
  };
  struct Result {
    uint64_t id = 0, n = 0;
    Status s;
    std::unique_ptr<char[]> mem;
  };
  std::shared_ptr<ImageDirReader> dir;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> wake;  // (mu) empty once stopped
  std::deque<Job> jobs;        // not started yet
  std::vector<Result> done;    // read (or failed), for Poll
  int threads = 0, idle = 0;
  bool stop = false;

  void Run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      ++idle;
      cv.wait(lk, [&] { return stop || !jobs.empty(); });
      --idle;
      if (stop) return;
      Job j = jobs.front();
      jobs.pop_front();
      lk.unlock();
      Result r{j.id, j.n, Status::Ok(), nullptr};
      // Past its deadline (its caller has had its timeout): not read at all. The shared file system has enough
      // to do when reads queue up here.
      if (NowUs() >= j.deadline_us) {
        r.s = Status(Code::kTimeout, "not read: its deadline passed while it waited for a reading thread");
      } else {
        r.mem.reset(new (std::nothrow) char[j.n ? j.n : 1]);
        r.s = r.mem ? dir->ReadNow(j.part, j.offset, j.n, r.mem.get())
                    : Status(Code::kNoMemory, "no memory for " + std::to_string(j.n) + " bytes of the image directory");
      }
      lk.lock();
      if (stop) return;
      done.push_back(std::move(r));
      if (wake) wake();
    }
  }
};

ImageDirReads::ImageDirReads(std::shared_ptr<ImageDirReader> dir, std::function<void()> wake)
    : sh_(std::make_shared<Shared>()) {
  sh_->dir = std::move(dir);
  sh_->wake = std::move(wake);
}

ImageDirReads::~ImageDirReads() { Stop(); }

void ImageDirReads::Stop() {
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    sh_->stop = true;
    sh_->wake = nullptr;
    sh_->jobs.clear();
  }
  sh_->cv.notify_all();
  pending_.clear();
}

void ImageDirReads::Read(uint32_t part, uint64_t offset, uint64_t n, int64_t deadline_us, Done done) {
  const uint64_t id = next_id_++;
  pending_[id] = Pending{part, offset, n, deadline_us, std::move(done)};
  next_deadline_ = std::min(next_deadline_, deadline_us);
  bool start = false;
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    if (sh_->stop) return;
    sh_->jobs.push_back({id, part, offset, n, deadline_us});
    // A thread more while every one is busy (stuck, maybe), up to kThreads.
    if (sh_->idle < static_cast<int>(sh_->jobs.size()) && sh_->threads < kThreads) {
      ++sh_->threads;
      start = true;
    }
  }
  if (start) std::thread([sh = sh_] { sh->Run(); }).detach();
  sh_->cv.notify_one();
}

bool ImageDirReads::Poll(int64_t now_us) {
  if (pending_.empty()) return false;  // the daemon's usual state: no lock taken
  std::vector<std::pair<Done, Shared::Result>> due;
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    if (sh_->stop) return false;
    for (Shared::Result& r : sh_->done) {
      auto it = pending_.find(r.id);
      if (it == pending_.end()) continue;  // answered at its deadline already
      due.emplace_back(std::move(it->second.done), std::move(r));
      pending_.erase(it);
    }
    sh_->done.clear();
  }
  if (now_us >= next_deadline_) {
    next_deadline_ = INT64_MAX;
    for (auto it = pending_.begin(); it != pending_.end();) {
      const Pending& p = it->second;
      if (now_us < p.deadline_us) {
        next_deadline_ = std::min(next_deadline_, p.deadline_us);
        ++it;
        continue;
      }
      Shared::Result r;
      r.s = Status(Code::kTimeout, "the image directory did not return bytes " + std::to_string(p.offset) + "+" +
                                       std::to_string(p.n) + " of partition " + std::to_string(p.part) +
                                       " in time (a slow or hung shared file system?)");
      due.emplace_back(std::move(it->second.done), std::move(r));
      it = pending_.erase(it);
    }
  }
  // After the bookkeeping: a `done` may start another read.
  for (auto& [done, r] : due) done(r.s, r.s.ok() ? r.mem.get() : nullptr, r.s.ok() ? r.n : 0);
  return !due.empty();
}

}  // namespace fanstore::daemon
