// Pack: walk the source, balance files over partitions, compress in parallel, write partitions then the index.
#include "fanstore/pack.hpp"

#include <dirent.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <queue>
#include <thread>

#include "format.hpp"
#include "pack_compress.hpp"
#include "pack_tree.hpp"

namespace fanstore {
namespace {

using Clock = std::chrono::steady_clock;

// Output must be absent or an empty directory, and must not lie inside the source (it would pack itself).
Status CheckOutput(const std::string& source, const std::string& output) {
  struct stat st;
  if (::lstat(output.c_str(), &st) == 0) {
    bool empty_dir = false;
    if (S_ISDIR(st.st_mode)) {
      empty_dir = true;
      if (DIR* d = ::opendir(output.c_str())) {
        while (dirent* e = ::readdir(d)) {
          std::string n = e->d_name;
          if (n != "." && n != "..") empty_dir = false;
        }
        ::closedir(d);
      }
    }
    if (!empty_dir)
      return Status(Code::kExists, "output " + output + " already exists and is not empty: remove it or choose another -o");
  }
  std::string parent = output.substr(0, output.find_last_of('/') == std::string::npos ? 0 : output.find_last_of('/'));
  if (output.find('/') == std::string::npos) parent = ".";
  if (parent.empty()) parent = "/";
  char rp_parent[PATH_MAX], rp_source[PATH_MAX];
  if (::realpath(parent.c_str(), rp_parent) == nullptr) {
    Status e = Status::FromErrno(errno, "cannot use output directory " + parent);
    return Status(e.code(), e.message() + " (create it first)");
  }
  if (::realpath(source.c_str(), rp_source) != nullptr) {
    std::string p = std::string(rp_parent) + "/", s = std::string(rp_source) + "/";
    if (p.compare(0, s.size(), s) == 0)
      return Status(Code::kInvalidArgument, "output " + output + " is inside the source " + source + ": choose an -o outside it");
  }
  return Status::Ok();
}

bool Replicated(std::string_view path, const std::vector<std::string>& globs) {
  if (globs.empty()) return false;
  std::string p(path);
  // No FNM_PATHNAME: '*' also matches '/', so "val/*" covers every file below val/.
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), p.c_str(), 0) == 0) return true;
  return false;
}

// Greedy largest-first into the least-loaded partition; ties go to the lower id (deterministic).
void AssignPartitions(PackTree* tree, const PackOptions& opts, uint32_t rep_part) {
  std::vector<uint32_t> files;
  for (uint32_t id = 0; id < tree->nodes.size(); ++id) {
    PackNode& n = tree->nodes[id];
    if ((n.mode & S_IFMT) != S_IFREG) continue;
    if (Replicated(tree->Path(n), opts.replicate))
      n.part = rep_part;
    else
      files.push_back(id);
  }
  std::sort(files.begin(), files.end(), [&](uint32_t a, uint32_t b) {
    uint64_t sa = tree->nodes[a].size, sb = tree->nodes[b].size;
    return sa != sb ? sa > sb : a < b;
  });
  using Load = std::pair<uint64_t, uint32_t>;  // (bytes, partition id)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (uint32_t p = 0; p < opts.parts; ++p) heap.push({0, p});
  for (uint32_t id : files) {
    Load l = heap.top();
    heap.pop();
    tree->nodes[id].part = l.second;
    l.first += tree->nodes[id].size;
    heap.push(l);
  }
}

// Runs the worker pool and the single writer. Tasks are written strictly in `tasks` order, so the bytes
// do not depend on thread scheduling; workers run ahead within a bounded window of files and bytes.
class PartitionWriter {
 public:
  PartitionWriter(const PackOptions& opts, int threads, PackTree* tree, std::vector<std::unique_ptr<WritableFile>>* files,
                  const std::function<void(const PackProgress&)>& progress)
      : opts_(opts), threads_(threads), tree_(tree), files_(files), progress_(progress) {}

  Status Run(const std::vector<uint32_t>& tasks) {
    tasks_ = &tasks;
    window_ = static_cast<size_t>(threads_) * 4 + 4;
    slots_.resize(window_);
    total_.files_total = tasks.size();
    // Sizes as stat'ed, copied: the writer updates node sizes to what it actually read while workers
    // are still deciding what to claim.
    stat_size_.reserve(tasks.size());
    for (uint32_t id : tasks) stat_size_.push_back(tree_->nodes[id].size);
    for (uint64_t sz : stat_size_) total_.bytes_total += sz;
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
    size_t task = 0;
    uint64_t claimed_bytes = 0;
    Status status;
    StoredFile file;
  };

  bool IsBig(size_t t) const { return stat_size_[t] > kStreamThreshold; }
  std::string SourcePath(uint32_t id) const { return opts_.source + "/" + std::string(tree_->Path(tree_->nodes[id])); }

  void Work() {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    for (;;) {
      size_t t;
      uint64_t bytes;
      {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
          if (stop_ || next_ >= tasks_->size()) {
            ZSTD_freeCCtx(cctx);
            return;
          }
          if (IsBig(next_)) {  // the writer streams those itself
            ++next_;
            continue;
          }
          bytes = stat_size_[next_];
          if (next_ - committed_ < window_ && (inflight_ == 0 || inflight_ + bytes <= kInflightBudget)) break;
          cv_work_.wait(lk);
        }
        t = next_++;
        inflight_ += bytes;
      }
      Slot r;
      uint32_t id = (*tasks_)[t];
      r.status = LoadStoredFile(SourcePath(id), stat_size_[t], level(), cctx, &r.file);
      r.task = t;
      r.claimed_bytes = bytes;
      r.ready = true;
      {
        std::lock_guard<std::mutex> lk(mu_);
        slots_[t % window_] = std::move(r);
      }
      cv_done_.notify_all();
    }
  }

  int level() const { return opts_.compress ? opts_.level : 0; }

  Status Write() {
    auto last_report = Clock::now();
    for (size_t t = 0; t < tasks_->size(); ++t) {
      uint32_t id = (*tasks_)[t];
      PackNode& n = tree_->nodes[id];
      WritableFile* f = (*files_)[n.part].get();
      n.offset = f->Size();
      Status s;
      if (IsBig(t)) {
        s = StreamStoredFile(SourcePath(id), level(), threads_, f, &n.codec, &n.size, &n.checksum, &n.stored_size);
      } else {
        Slot r;
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_done_.wait(lk, [&] { return slots_[t % window_].ready && slots_[t % window_].task == t; });
          r = std::move(slots_[t % window_]);
          slots_[t % window_].ready = false;
          inflight_ -= r.claimed_bytes;
        }
        s = r.status;
        if (s.ok()) s = f->Append(r.file.bytes.data(), r.file.bytes.size());
        n.codec = r.file.codec;
        n.size = r.file.size;
        n.checksum = r.file.checksum;
        n.stored_size = r.file.bytes.size();
      }
      if (!s.ok()) return s;
      {
        std::lock_guard<std::mutex> lk(mu_);
        committed_ = t + 1;
      }
      cv_work_.notify_all();
      total_.files_done = t + 1;
      total_.bytes_done += n.size;
      if (progress_ && Clock::now() - last_report > std::chrono::milliseconds(100)) {
        progress_(total_);
        last_report = Clock::now();
      }
    }
    if (progress_) progress_(total_);
    return Status::Ok();
  }

  static constexpr uint64_t kInflightBudget = 512ull << 20;
  const PackOptions& opts_;
  int threads_;
  PackTree* tree_;
  std::vector<std::unique_ptr<WritableFile>>* files_;
  const std::function<void(const PackProgress&)>& progress_;
  const std::vector<uint32_t>* tasks_ = nullptr;
  std::vector<uint64_t> stat_size_;  // per task, fixed for the whole run
  size_t window_ = 0;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<Slot> slots_;
  size_t next_ = 0, committed_ = 0;
  uint64_t inflight_ = 0;
  bool stop_ = false;
  PackProgress total_;
};

std::string PartHeader(uint32_t part_id, uint64_t image_id, uint64_t data_size) {
  using namespace format;
  std::string h(kPartHeaderSize, '\0');
  std::memcpy(h.data() + phdr::kMagic, kPartMagic, sizeof kPartMagic);
  Store32(h.data() + phdr::kVersion, kVersion);
  Store32(h.data() + phdr::kHeaderSize, kPartHeaderSize);
  Store32(h.data() + phdr::kPartId, part_id);
  Store64(h.data() + phdr::kImageId, image_id);
  Store64(h.data() + phdr::kDataSize, data_size);
  Store64(h.data() + phdr::kHeaderXxh3, XXH3_64bits(h.data(), phdr::kHeaderXxh3));
  return h;
}

// Everything after the checks, writing into `tmp`; the caller removes `tmp` on failure.
Status PackInto(const PackOptions& opts, int threads, const std::string& tmp, WriteEnv* env, PackTree* tree,
                const std::function<void(const PackProgress&)>& progress, IndexMeta* meta) {
  bool any_rep = false;
  AssignPartitions(tree, opts, opts.parts);
  for (const PackNode& n : tree->nodes) any_rep |= n.part == opts.parts;
  const uint32_t nparts = opts.parts + (any_rep ? 1 : 0);
  meta->regular_parts = opts.parts;
  meta->replicated_part = any_rep ? opts.parts : kNoPartition;

  std::vector<std::unique_ptr<WritableFile>> files;
  const std::string placeholder(format::kPartHeaderSize, '\0');
  for (uint32_t p = 0; p < nparts; ++p) {
    meta->parts.push_back({format::PartitionFileName(p, opts.parts), 0, 0});
    auto f = env->NewWritableFile(tmp + "/" + meta->parts.back().file_name);
    if (!f.ok()) return f.status();
    Status s = (*f)->Append(placeholder.data(), placeholder.size());
    if (!s.ok()) return s;
    files.push_back(std::move(*f));
  }

  std::vector<uint32_t> tasks;  // (partition, id) order: each partition is written front to back
  for (uint32_t id = 0; id < tree->nodes.size(); ++id)
    if (tree->nodes[id].part != kNoPartition) tasks.push_back(id);
  std::stable_sort(tasks.begin(), tasks.end(),
                   [&](uint32_t a, uint32_t b) { return tree->nodes[a].part < tree->nodes[b].part; });
  Status s = PartitionWriter(opts, threads, tree, &files, progress).Run(tasks);
  if (!s.ok()) return s;

  for (uint32_t id : tasks) {
    const PackNode& n = tree->nodes[id];
    meta->parts[n.part].stored_bytes += n.stored_size;
    meta->parts[n.part].files += 1;
    meta->bytes_in += n.size;
    meta->bytes_stored += n.stored_size;
  }
  const uint64_t image_id = ComputeImageId(*tree, *meta);
  for (uint32_t p = 0; p < nparts; ++p) {
    std::string h = PartHeader(p, image_id, files[p]->Size() - format::kPartHeaderSize);
    if (!(s = files[p]->WriteAt(0, h.data(), h.size())).ok()) return s;
    if (!(s = files[p]->Sync()).ok()) return s;
    if (!(s = files[p]->Close()).ok()) return s;
  }
  // The index goes last: an image without a complete index is never mistaken for a valid one.
  auto idx = env->NewWritableFile(tmp + "/" + format::kIndexName);
  if (!idx.ok()) return idx.status();
  if (!(s = WriteIndex(*tree, *meta, image_id, idx->get())).ok()) return s;
  if (!(s = (*idx)->Sync()).ok()) return s;
  if (!(s = (*idx)->Close()).ok()) return s;
  return env->SyncDir(tmp);
}

// Adds what the user can do about a failure to the status message.
Status WithAdvice(const Status& s, const std::string& output) {
  switch (s.code()) {
    case Code::kNoSpace:
      return Status(s.code(), s.message() + ": free space on the file system of " + output + " or choose another -o");
    case Code::kPermission:
      return Status(s.code(), s.message() + ": check the permissions of the source and of the output's parent");
    case Code::kNameTooLong:
      return Status(s.code(), s.message() + ": shorten the source path or the names inside it");
    default:
      return s;
  }
}

}  // namespace

Result<PackReport> PackWithEnv(const PackOptions& opts_in, WriteEnv* env,
                               const std::function<void(const PackProgress&)>& progress,
                               const std::function<void(const std::string&)>& warn) {
  const auto start = Clock::now();
  PackOptions opts = opts_in;
  while (opts.output.size() > 1 && opts.output.back() == '/') opts.output.pop_back();
  while (opts.source.size() > 1 && opts.source.back() == '/') opts.source.pop_back();
  if (opts.source.empty()) return Status(Code::kInvalidArgument, "no source directory given");
  if (opts.output.empty()) return Status(Code::kInvalidArgument, "no output given: use -o IMAGE");
  if (opts.parts < 1 || opts.parts > 100000)
    return Status(Code::kInvalidArgument, "--parts must be between 1 and 100000, got " + std::to_string(opts.parts));
  if (opts.level == 0) opts.compress = false;
  if (opts.compress && (opts.level < 1 || opts.level > ZSTD_maxCLevel()))
    return Status(Code::kInvalidArgument, "--level must be between 0 (store raw) and " +
                                              std::to_string(ZSTD_maxCLevel()) + ", got " + std::to_string(opts.level));
  int threads = opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  struct stat st;
  if (::stat(opts.source.c_str(), &st) != 0)
  {
    Status e = Status::FromErrno(errno, "cannot read source " + opts.source);
    return Status(e.code(), e.message() + " (check the path)");
  }
  if (!S_ISDIR(st.st_mode)) return Status(Code::kNotDirectory, "source " + opts.source + " is not a directory");
  Status s = CheckOutput(opts.source, opts.output);
  if (!s.ok()) return s;

  PackTree tree;
  s = WalkSource(opts.source, &tree, warn);
  if (!s.ok()) return WithAdvice(s, opts.output);

  const std::string tmp = opts.output + ".tmp-" + std::to_string(::getpid());
  if (!(s = env->CreateDir(tmp)).ok()) return WithAdvice(s, opts.output);
  IndexMeta meta;
  s = PackInto(opts, threads, tmp, env, &tree, progress, &meta);
  if (s.ok()) s = env->Rename(tmp, opts.output);
  if (!s.ok()) {
    env->RemoveDirAndFiles(tmp);
    return WithAdvice(s, opts.output);
  }
  std::string parent = opts.output.find('/') == std::string::npos ? "." : opts.output.substr(0, opts.output.find_last_of('/'));
  (void)env->SyncDir(parent.empty() ? "/" : parent);  // the image is complete either way; this only hardens the rename

  PackReport rep;
  rep.files = tree.files;
  rep.dirs = tree.dirs;
  rep.skipped = tree.skipped;
  rep.bytes_in = meta.bytes_in;
  rep.bytes_stored = meta.bytes_stored;
  rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

Result<PackReport> Pack(const PackOptions& opts, const std::function<void(const PackProgress&)>& progress,
                        const std::function<void(const std::string&)>& warn) {
  return PackWithEnv(opts, DefaultWriteEnv(), progress, warn);
}

}  // namespace fanstore
