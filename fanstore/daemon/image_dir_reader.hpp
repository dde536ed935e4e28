// Reads of the image directory on the shared file system, the one place the daemon reads it after start-up:
// staging's pieces, and ranges a client or a peer needs before they are staged anywhere. Every byte is counted,
// and --stage-bandwidth paces them: staging's reads wait for their turn, a reader's go at once and push staging's
// next turn back by what they took (a client waiting for bytes is served first; staging still gets what is left).
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon {

// pread until `n` bytes are in dst (EINTR retried): an errno error naming `name`, or kIoError when the
// file ends first, saying where and `why_short`.
Status ReadFullAt(int fd, char* dst, uint64_t n, uint64_t offset, const std::string& name, const char* why_short);

class ImageDirReader {
 public:
  // `paths`: each partition's file in the image directory, by id. `bytes_per_s` 0: no cap.
  ImageDirReader(std::vector<std::string> paths, uint64_t bytes_per_s);
  ~ImageDirReader();
  ImageDirReader(const ImageDirReader&) = delete;
  ImageDirReader& operator=(const ImageDirReader&) = delete;

  // Staging's read: waits for the bandwidth budget, then reads exactly n bytes. `cancelled` ends the wait early
  // (kIoError "staging interrupted", *interrupted set): the bytes' booking is given back. `at_once`: no wait (a
  // reader waits for this piece), charged to the budget as a reader's read is, counted as staging's.
  Status ReadForStaging(uint32_t part, uint64_t offset, uint64_t n, char* dst, const std::function<bool()>& cancelled,
                        bool at_once = false, bool* interrupted = nullptr);
  // A reader's read: now, charged to the budget.
  Status ReadNow(uint32_t part, uint64_t offset, uint64_t n, char* dst);

  uint64_t staging_bytes() const { return staging_bytes_.load(std::memory_order_relaxed); }
  uint64_t reader_bytes() const { return reader_bytes_.load(std::memory_order_relaxed); }

 private:
  // Reads exactly n bytes, added to *counted.
  Status Read(uint32_t part, uint64_t offset, uint64_t n, char* dst, std::atomic<uint64_t>* counted);
  // Books n bytes at the cap; returns when (steady clock, us) their slot ends (0 without a cap).
  int64_t Book(uint64_t n);
  // Gives a booking of n bytes back (a wait cut short): the bytes after it go that much sooner.
  void Unbook(uint64_t n);
  // How long n bytes take at the cap, us.
  int64_t SlotUs(uint64_t n) const {
    return static_cast<int64_t>(static_cast<double>(n) * 1e6 / static_cast<double>(rate_));
  }

  std::vector<std::string> paths_;
  std::vector<int> fds_;  // opened on first use
  uint64_t rate_;
  std::mutex mu_;
  int64_t next_free_us_ = 0;
  std::atomic<uint64_t> staging_bytes_{0}, reader_bytes_{0};
};

// Reads of the image directory for clients and peers, off the daemon's progress thread: a slow or hung shared file
// system holds up only the reads that need it (and the threads doing them), never the daemon's answers to hellos,
// to reads of what is staged here, and to peers. A few threads, started as needed, do the reads; each read's
// `done` runs on the progress thread, in Poll, with the bytes or the read's error -- or with kTimeout once its
// deadline passed first (the thread's result, if it ever comes, is then dropped). The threads own what they use,
// so one stuck in a read never holds up the daemon's exit.
class ImageDirReads {
 public:
  using Done = std::function<void(const Status& s, const char* data, uint64_t len)>;
  static constexpr int kThreads = 4;
  // `wake` (called from the reading threads) ends the progress thread's wait, so that a read done is handed on at
  // once.
  ImageDirReads(std::shared_ptr<ImageDirReader> dir, std::function<void()> wake);
  ~ImageDirReads();
  ImageDirReads(const ImageDirReads&) = delete;
  ImageDirReads& operator=(const ImageDirReads&) = delete;

  // (progress thread) Reads bytes [offset, offset + n) of partition `part`; `done` follows in a later Poll.
  void Read(uint32_t part, uint64_t offset, uint64_t n, int64_t deadline_us, Done done);
  // (progress thread) Calls `done` of the reads finished or past their deadline; true when it called any.
  bool Poll(int64_t now_us);
  // No `done` is called and no `wake` made from now on (before what they call into goes). Idempotent.
  void Stop();
  size_t pending() const { return pending_.size(); }

 private:
  struct Shared;
  struct Pending {
    uint32_t part = 0;
    uint64_t offset = 0, n = 0;
    int64_t deadline_us = 0;
    Done done;
  };
  std::shared_ptr<Shared> sh_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  int64_t next_deadline_ = INT64_MAX;
};

}  // namespace fanstore::daemon
