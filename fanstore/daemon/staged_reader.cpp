// StagedReader: pread over the partition files being staged or staged, with the size checks that keep a bad
// request or a damaged staged copy an error reply.
#include "staged_reader.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "image_dir_reader.hpp"  // ReadFullAt

#include <unistd.h>

#include <algorithm>

namespace fanstore::daemon {

StagedReader::StagedReader(uint32_t partitions) : parts_(partitions) {}

StagedReader::~StagedReader() {
  for (const Part& p : parts_)
    if (p.fd >= 0) close(p.fd);
}

void StagedReader::Begin(uint32_t part, int fd, const std::string& name, uint64_t size,
                         std::vector<uint64_t> piece_ends) {
  Part& p = parts_.at(part);
  p.fd = fd;
  p.size = size;
  p.name = name;
  p.piece_done.reset(new std::atomic<bool>[piece_ends.size()]());  // all false
  p.piece_ends = std::move(piece_ends);
}

void StagedReader::MarkPiece(uint32_t part, size_t k) {
  parts_.at(part).piece_done[k].store(true, std::memory_order_release);
}

bool StagedReader::Staged(uint32_t part, uint64_t offset, uint64_t n) const {
  if (!Has(part)) return false;
  const Part& p = parts_[part];
  // The first piece ending past `offset`, up to the one holding the range's last byte (none: complete).
  size_t k =
      static_cast<size_t>(std::upper_bound(p.piece_ends.begin(), p.piece_ends.end(), offset) - p.piece_ends.begin());
  for (; k < p.piece_ends.size(); ++k) {
    if (!p.piece_done[k].load(std::memory_order_acquire)) return false;
    if (p.piece_ends[k] >= offset + n) break;
  }
  return true;
}

bool StagedReader::InOnePiece(uint32_t part, uint64_t offset, uint64_t n, size_t* piece) const {
  if (!Has(part)) return false;
  const Part& p = parts_[part];
  auto it = std::upper_bound(p.piece_ends.begin(), p.piece_ends.end(), offset);
  if (it == p.piece_ends.end() || offset + n > *it) return false;
  *piece = static_cast<size_t>(it - p.piece_ends.begin());
  return true;
}

void StagedReader::SetWaits(int64_t wait_us, std::function<bool(uint32_t, size_t)> can_wait,
                            std::function<void(uint32_t, size_t)> hurry) {
  wait_us_ = wait_us;
  can_wait_ = std::move(can_wait);
  hurry_ = std::move(hurry);
}

bool StagedReader::Await(uint32_t part, uint64_t offset, uint64_t n, std::function<void()> done) {
  size_t piece = 0;
  if (wait_us_ <= 0 || !can_wait_ || failed_.load(std::memory_order_acquire) || Staged(part, offset, n) ||
      !InOnePiece(part, offset, n, &piece) || !can_wait_(part, piece))
    return false;
  if (hurry_) hurry_(part, piece);
  waits_.push_back({part, piece, daemon_proto::NowUs() + wait_us_, std::move(done)});
  return true;
}

bool StagedReader::PollWaits(int64_t now_us) {
  if (waits_.empty()) return false;
  bool failed = failed_.load(std::memory_order_acquire);
  std::vector<std::function<void()>> due;
  for (size_t i = 0; i < waits_.size();) {
    Wait& w = waits_[i];
    if (failed || now_us >= w.deadline_us || parts_[w.part].piece_done[w.piece].load(std::memory_order_acquire)) {
      due.push_back(std::move(w.done));
      w = std::move(waits_.back());
      waits_.pop_back();
    } else {
      ++i;
    }
  }
  for (auto& d : due) d();
  return !due.empty();
}

Status StagedReader::Check(uint32_t part, uint64_t offset, uint64_t n) const {
  if (!Has(part)) return Status(Code::kIoError, "partition " + std::to_string(part) + " is not staged on this rank");
  if (!RangeWithin(offset, n, parts_[part].size))
    return Status(Code::kInvalidArgument, "bytes " + std::to_string(offset) + "+" + std::to_string(n) +
                                              " are outside " + parts_[part].name + " (" +
                                              std::to_string(parts_[part].size) + " bytes)");
  return Status::Ok();
}

Status StagedReader::Read(uint32_t part, uint64_t offset, uint64_t n, char* dst, bool staged_only) const {
  Status s = Check(part, offset, n);
  if (!s.ok()) return s;
  const Part& p = parts_[part];
  if (!Staged(part, offset, n)) {
    if (staged_only)
      return failed_.load(std::memory_order_acquire)
                 ? Status(Code::kIoError, "staging of " + p.name + " failed on this rank")
                 : Status(kNotStagedYet, "not staged yet");
    return Status(Code::kIoError, p.name + " is not staged yet");
  }
  return ReadFullAt(p.fd, dst, n, offset, p.name, "shorter than when staged: was the staged copy truncated?");
}

}  // namespace fanstore::daemon
