// WriteChunks: a bounded window of chunks in flight, read and compressed by workers, written strictly in order.
#include "pack_writer.hpp"

#include <xxhash.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "fanstore/protocol/image_format.hpp"
#include "hash.hpp"
#include "pack_compress.hpp"

namespace fanstore {
namespace {

using Clock = std::chrono::steady_clock;

// The open source stream of a multi-chunk file, shared by the workers of its chunks: they read in chunk
// order (a stream, e.g. an old image's zstd frame, can only be read front to back) and compress in parallel.
struct SharedStream {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<SourceStream> stream;
  uint64_t next = 0;  // the chunk whose bytes come next
  Status error;
};

class ChunkPipeline {
 public:
  ChunkPipeline(const std::vector<uint32_t>& tasks, PackTree* tree, PackSource* source, int level, uint32_t shift,
                int threads, std::vector<std::unique_ptr<WritableFile>>* files,
                const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>* stop)
      : tasks_(tasks),
        tree_(tree),
        source_(source),
        level_(level),
        shift_(shift),
        threads_(threads),
        files_(files),
        progress_(progress),
        interrupt_(stop) {}

  Status Run() {
    // Sizes as the walk stat'ed them, copied: the writer fills node fields while workers still read these.
    size_.reserve(tasks_.size());
    for (uint32_t id : tasks_) size_.push_back(tree_->nodes[id].size);
    units_total_ = 0;
    for (uint64_t s : size_) {
      units_total_ += Units(s);
      total_.bytes_total += s;
    }
    total_.files_total = tasks_.size();
    // Room for the workers to run well ahead of the writer (small files: many per MiB), within kInflightBudget.
    window_ = static_cast<uint64_t>(threads_) * 32 + 32;
    slots_.resize(window_);
    std::vector<std::thread> workers;
    for (int i = 0; i < threads_; ++i) workers.emplace_back([this] { Work(); });
    Status s = Write();
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& w : workers) w.join();
    return s;
  }

 private:
  struct Slot {
    bool ready = false;
    uint64_t seq = 0;
    uint64_t claimed_bytes = 0;
    Status status;
    StoredChunk chunk;
  };

  uint64_t Units(uint64_t size) const { return size == 0 ? 1 : format::ChunkCount(size, shift_); }
  uint64_t ChunkBytes(size_t t, uint64_t i) const {
    return std::min<uint64_t>(size_[t] - (i << shift_), uint64_t{1} << shift_);
  }
  Status Changed(size_t t) const {
    return Status(Code::kInvalidArgument, source_->Describe(*tree_, tasks_[t]) +
                                              " changed while it was being packed (its size is no longer " +
                                              std::to_string(size_[t]) + " bytes): pack a tree nobody writes to");
  }

  // Reads chunk i of task t into c->raw: the whole file for a one-chunk file, else through the shared stream.
  Status ReadChunk(size_t t, uint64_t i, std::shared_ptr<SharedStream> shared, StoredChunk* c) {
    const uint64_t n = Units(size_[t]);
    c->raw_size = size_[t] == 0 ? 0 : ChunkBytes(t, i);
    if (!c->raw || c->raw_capacity < c->raw_size + 1) {  // +1: the probe for bytes past the expected end
      c->raw.reset(new char[c->raw_size + 1]);
      c->raw_capacity = c->raw_size + 1;
    }
    auto read_exact = [&](SourceStream* s) -> Status {
      auto got = s->Read(c->raw.get(), c->raw_size);
      if (!got.ok()) return got.status();
      if (*got != c->raw_size) return Changed(t);
      if (i + 1 == n) {  // the last chunk: the file must end here
        auto more = s->Read(c->raw.get() + c->raw_size, 1);
        if (!more.ok()) return more.status();
        if (*more != 0) return Changed(t);
      }
      return Status::Ok();
    };
    if (n == 1) {
      auto s = source_->Open(*tree_, tasks_[t]);
      if (!s.ok()) return s.status();
      return read_exact(s->get());
    }
    std::unique_lock<std::mutex> lk(shared->mu);
    shared->cv.wait(lk, [&] { return shared->next == i; });
    Status st = shared->error;
    if (st.ok() && i == 0) {
      auto s = source_->Open(*tree_, tasks_[t]);
      if (s.ok()) shared->stream = std::move(s).value();
      else st = s.status();
    }
    if (st.ok()) st = read_exact(shared->stream.get());
    if (!st.ok()) shared->error = st;
    shared->next = i + 1;
    if (i + 1 == n) shared->stream.reset();
    lk.unlock();
    shared->cv.notify_all();
    return st;
  }

  // One unit a worker has claimed: its sequence number, task, chunk and (multi-chunk files) shared stream.
  struct Claim {
    uint64_t seq, i, bytes;
    size_t t;
    std::shared_ptr<SharedStream> shared;
  };

  // Under mu_: claims the next unit when the window and the in-flight budget allow it.
  bool ClaimNextLocked(Claim* c) {
    if (next_seq_ >= units_total_) return false;
    const uint64_t bytes = size_[next_t_] == 0 ? 0 : ChunkBytes(next_t_, next_i_);
    if (next_seq_ - committed_ >= window_ || (inflight_ != 0 && inflight_ + bytes > kInflightBudget)) return false;
    c->seq = next_seq_++;
    c->t = next_t_;
    c->i = next_i_;
    c->bytes = bytes;
    c->shared.reset();
    const uint64_t n = Units(size_[c->t]);
    if (n > 1) {
      auto& slot = streams_[c->t];
      if (!slot) slot = std::make_shared<SharedStream>();
      c->shared = slot;
      if (c->i + 1 == n) streams_.erase(c->t);
    }
    if (++next_i_ == n) {
      next_i_ = 0;
      ++next_t_;
    }
    inflight_ += bytes;
    return true;
  }

  // Workers claim small units in batches (up to 32 units or 1 MiB) and hand them over in one go: a tree of
  // small files would otherwise cost two lock handoffs and a wake-up per file.
  void Work() {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    std::vector<Claim> batch;
    std::vector<Slot> done;
    for (;;) {
      batch.clear();
      done.clear();
      {
        std::unique_lock<std::mutex> lk(mu_);
        Claim c;
        for (;;) {
          if (stop_ || next_seq_ >= units_total_) {
            ZSTD_freeCCtx(cctx);
            return;
          }
          if (ClaimNextLocked(&c)) break;
          cv_work_.wait(lk);
        }
        uint64_t bytes = c.bytes;
        batch.push_back(std::move(c));
        while (batch.size() < 32 && bytes < (1u << 20) && ClaimNextLocked(&c)) {
          bytes += c.bytes;
          batch.push_back(std::move(c));
        }
        done.resize(batch.size());
        for (Slot& r : done) {
          if (spare_.empty()) break;
          r.chunk = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      for (size_t k = 0; k < batch.size(); ++k) {
        Slot& r = done[k];
        r.status = ReadChunk(batch[k].t, batch[k].i, std::move(batch[k].shared), &r.chunk);
        if (r.status.ok()) CompressChunk(level_, cctx, &r.chunk);
        r.seq = batch[k].seq;
        r.claimed_bytes = batch[k].bytes;
        r.ready = true;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (Slot& r : done) slots_[r.seq % window_] = std::move(r);
      }
      cv_done_.notify_all();
    }
  }

  Status Write() {
    auto last_report = Clock::now();
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> whole(XXH3_createState(), &XXH3_freeState);
    std::deque<Slot> run;           // ready slots taken in one go, in sequence order
    std::vector<StoredChunk> used;  // their buffers, returned to the workers in one go
    uint64_t seq = 0;
    auto give_back = [&] {
      {
        std::lock_guard<std::mutex> lk(mu_);
        committed_ = seq;
        for (StoredChunk& c : used) spare_.push_back(std::move(c));
      }
      used.clear();
      cv_work_.notify_all();
    };
    for (size_t t = 0; t < tasks_.size(); ++t) {
      PackNode& node = tree_->nodes[tasks_[t]];
      WritableFile* f = (*files_)[node.part].get();
      if (f != out_.file) {
        Status s = out_.Flush();
        if (!s.ok()) return s;
        out_.file = f;
      }
      const uint64_t n = Units(size_[t]);
      node.offset = out_.Size();
      node.chunk_first = n > 1 ? tree_->chunks.size() : 0;
      XXH3_64bits_reset(whole.get());
      for (uint64_t i = 0; i < n; ++i) {
        if (run.empty()) {
          if (!used.empty()) give_back();
          std::unique_lock<std::mutex> lk(mu_);
          cv_done_.wait(lk, [&] { return slots_[seq % window_].ready && slots_[seq % window_].seq == seq; });
          for (uint64_t k = seq; k < units_total_ && run.size() < 64; ++k) {
            Slot& slot = slots_[k % window_];
            if (!slot.ready || slot.seq != k) break;
            inflight_ -= slot.claimed_bytes;
            slot.ready = false;
            run.push_back(std::move(slot));
          }
        }
        Slot r = std::move(run.front());
        run.pop_front();
        ++seq;
        if (!r.status.ok()) return r.status;
        if (Stopped(interrupt_)) return Interrupted();
        const StoredChunk& c = r.chunk;
        if (n > 1) {
          tree_->chunks.push_back(
              {out_.Size() - node.offset, static_cast<uint32_t>(c.stored_size), c.codec, c.checksum});
          Xxh3Update(whole.get(), c.raw.get(), c.raw_size);
        } else {
          node.codec = c.codec;
          node.checksum = c.checksum;
        }
        Status s = out_.Append(c.stored(), c.stored_size);
        if (!s.ok()) return s;
        total_.bytes_done += c.raw_size;
        if (r.chunk.raw_capacity) used.push_back(std::move(r.chunk));
      }
      node.size = size_[t];
      node.stored_size = out_.Size() - node.offset;
      if (n > 1) {
        node.codec = Codec::kChunked;
        node.checksum = XXH3_64bits_digest(whole.get());
      }
      total_.files_done = t + 1;
      if (progress_ && Clock::now() - last_report > std::chrono::milliseconds(100)) {
        progress_(total_);
        last_report = Clock::now();
      }
    }
    give_back();
    if (progress_) progress_(total_);
    return out_.Flush();
  }

  // The writer's output, gathered into writes of about 1 MiB: a small-file tree would otherwise cost one
  // write(2) per file on the one thread everything waits for.
  struct Gather {
    WritableFile* file = nullptr;
    std::string buf;
    uint64_t Size() const { return file->Size() + buf.size(); }
    Status Append(const char* p, size_t n) {
      constexpr size_t kGather = 1 << 20;
      if (buf.size() + n > kGather) {
        Status s = Flush();
        if (!s.ok()) return s;
      }
      if (n >= kGather) return file->Append(p, n);
      buf.append(p, n);
      return Status::Ok();
    }
    Status Flush() {
      if (file == nullptr || buf.empty()) return Status::Ok();
      Status s = file->Append(buf.data(), buf.size());
      buf.clear();
      return s;
    }
  };
  Gather out_;

  static constexpr uint64_t kInflightBudget = 256ull << 20;
  const std::vector<uint32_t>& tasks_;
  PackTree* tree_;
  PackSource* source_;
  int level_;
  uint32_t shift_;
  int threads_;
  std::vector<std::unique_ptr<WritableFile>>* files_;
  const std::function<void(const PackProgress&)>& progress_;
  const std::atomic<bool>* interrupt_;  // PackOptions::stop
  std::vector<uint64_t> size_;          // per task, fixed for the whole run
  uint64_t units_total_ = 0;
  uint64_t window_ = 0;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<Slot> slots_;
  std::unordered_map<size_t, std::shared_ptr<SharedStream>> streams_;  // multi-chunk files being read
  std::vector<StoredChunk> spare_;
  uint64_t next_seq_ = 0, committed_ = 0;
  size_t next_t_ = 0;
  uint64_t next_i_ = 0;
  uint64_t inflight_ = 0;
  bool stop_ = false;
  PackProgress total_;
};

}  // namespace

Status WriteChunks(const std::vector<uint32_t>& tasks, PackTree* tree, PackSource* source, int level,
                   uint32_t chunk_shift, int threads, std::vector<std::unique_ptr<WritableFile>>* files,
                   const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>* stop) {
  return ChunkPipeline(tasks, tree, source, level, chunk_shift, threads, files, progress, stop).Run();
}

}  // namespace fanstore
