// Reads byte ranges of the partitions this rank holds (for peers' requests, and for local clients whose view is
// older than ours), while they are being staged and after. A partition being staged is a file filled piece by
// piece (stage_layout.hpp): a range whose pieces are all in place is read from it; one that is not yet is the
// caller's to read from the image directory (ImageDirReads: off the progress thread, which a slow shared file
// system must not stall). Every read is bounds-checked and a short read (a staged copy deleted or truncated under
// us) is an error, never a fault. Pieces are marked from staging's threads; reads come from the progress thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon {

class StagedReader {
 public:
  // None yet: Begin adds them.
  explicit StagedReader(uint32_t partitions);
  ~StagedReader();
  StagedReader(const StagedReader&) = delete;
  StagedReader& operator=(const StagedReader&) = delete;

  // Before serving starts: partition `part` is being staged into the file open (read-only) as `fd`, `size` bytes,
  // in pieces ending at `piece_ends` (ascending, the last == size). Takes the fd.
  void Begin(uint32_t part, int fd, const std::string& name, uint64_t size, std::vector<uint64_t> piece_ends);
  // Piece `k` of `part` is written and verified. Any thread.
  void MarkPiece(uint32_t part, size_t k);
  // Staging on this rank has stopped for good: ranges not staged are read from the image directory, and staged-
  // only reads of them fail with kIoError instead of "not yet".
  void StagingFailed() { failed_.store(true, std::memory_order_release); }

  bool Has(uint32_t part) const { return part < parts_.size() && parts_[part].fd >= 0; }
  // Every byte of [offset, offset + n) is staged here.
  bool Staged(uint32_t part, uint64_t offset, uint64_t n) const;
  // The range lies inside one piece of a partition being staged: true, and which one in *piece.
  bool InOnePiece(uint32_t part, uint64_t offset, uint64_t n, size_t* piece) const;
  // kInvalidArgument when [offset, offset + n) is not inside the file; kIoError when the partition is not held.
  Status Check(uint32_t part, uint64_t offset, uint64_t n) const;
  // Reads the range from the staged file. A range not staged yet is kIoError (the caller reads the image directory
  // instead); `staged_only`: kNotStagedYet (kIoError once staging failed), for a peer's staged-only request.
  Status Read(uint32_t part, uint64_t offset, uint64_t n, char* dst, bool staged_only = false) const;
  // What a staged-only read of a range not staged yet answers (while staging goes on): ask again later.
  static constexpr Code kNotStagedYet = Code::kUnsupported;

  // Waiting for a piece instead of reading the image directory a second time. `can_wait(part, piece)` says whether
  // staging here will read that piece itself soon (this rank is its reader and staging goes on); `hurry(part,
  // piece)` moves it to the front of staging's reads; a wait lasts at most `wait_us`. Before serving starts.
  void SetWaits(int64_t wait_us, std::function<bool(uint32_t, size_t)> can_wait,
                std::function<void(uint32_t, size_t)> hurry);
  // (progress thread) True when the range lies in one piece that staging here reads next: hurries it, and calls
  // `done()` once the piece is staged or the wait is up (the caller then reads as usual). False, and no call, else.
  bool Await(uint32_t part, uint64_t offset, uint64_t n, std::function<void()> done);
  // (progress thread) Calls the waits whose piece is in or whose time is up; true when it called any.
  bool PollWaits(int64_t now_us);

 private:
  struct Part {
    int fd = -1;
    uint64_t size = 0;
    std::string name;
    std::vector<uint64_t> piece_ends;  // empty: complete from the start
    std::unique_ptr<std::atomic<bool>[]> piece_done;
  };
  std::vector<Part> parts_;
  std::atomic<bool> failed_{false};
  struct Wait {
    uint32_t part;
    size_t piece;
    int64_t deadline_us;
    std::function<void()> done;
  };
  int64_t wait_us_ = 0;
  std::function<bool(uint32_t, size_t)> can_wait_;
  std::function<void(uint32_t, size_t)> hurry_;
  std::vector<Wait> waits_;
};

}  // namespace fanstore::daemon
