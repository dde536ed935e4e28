// The client's side of the node-wide cache: read, offer and assemble decoded chunks in shared tmpfs files.
//
// Directory layout (made by JoinNodeCache, node_cache_join.cpp):
//   state        one page: magic, the image's content key, chunk size, entry count, budget, bytes cached (atomic)
//   small.data   sparse; the one chunk of file `id` (files up to one chunk) at id x chunk size
//   small.bits   header + one bit per entry id: set once that slot holds the file's verified bytes
//   f<ID>.data   sparse, exactly the file's size; chunk i at i x chunk size (files of more than one chunk):
//                the file a kernel fd of that image file opens, shared by every process of the node
//   f<ID>.bits   header (which data inode it describes) + one bit per chunk
//
// Invariants that make it safe without any cross-process lock (a process may die anywhere):
// - A data file holds only verified bytes or holes; a writer pwrites a whole chunk and only then sets its bit,
//   so a bit is never set for bytes that are not all there.
// - Bytes never change once written and nothing punches holes: eviction unlinks a pair of files; processes
//   that hold them keep reading (and mapping) the old inode unchanged.
// - A bits file names its data file's inode, so a reader never pairs bits of one generation with data of another.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

namespace node_cache_format {
inline constexpr char kStateMagic[8] = {'F', 'S', 'N', 'C', 'S', 'T', 'A', 'T'};
inline constexpr char kBitsMagic[8] = {'F', 'S', 'N', 'C', 'B', 'I', 'T', 'S'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kStateSize = 4096;
inline constexpr size_t kBitsHeader = 64;
// state page
inline constexpr size_t kStMagic = 0, kStVersion = 8, kStChunkShift = 12, kStImageId = 16 /* Image::ContentKey */,
                        kStEntries = 24, kStBudget = 32, kStUsed = 40, kStLastRecount = 48;
// bits header
inline constexpr size_t kBtMagic = 0, kBtDataIno = 8, kBtDataDev = 16, kBtBits = 24, kBtStreams = 32;
}  // namespace node_cache_format

class NodeCache {
 public:
  // Attaches to the cache directory `dir` made for `img` (state checked: same image id, chunk size, entries).
  static Result<std::unique_ptr<NodeCache>> Attach(const std::string& dir, const Image& img);
  ~NodeCache();

  // Copies chunk `c` of `e` into out (c.raw_size bytes) when the node holds it: true. False when it does
  // not (or on any error: the caller decodes instead).
  bool Read(const Entry& e, const Chunk& c, char* out);
  // Copies bytes [from, from + len) of chunk `c` into out when the node holds the chunk (a small read of a
  // large cached file costs one pread of that size, not a chunk).
  bool ReadRange(const Entry& e, const Chunk& c, uint64_t from, size_t len, char* out);
  // Offers verified bytes of chunk `c` of `e`. Kept while the node's budget allows; `must` (a kernel fd is
  // being assembled) makes room by evicting the least recently used other files.
  void Offer(const Entry& e, const Chunk& c, const char* data, bool must);
  // Whether chunk `i` of multi-chunk file `e` is present (for assembling a kernel fd).
  bool HasChunk(const Entry& e, uint64_t i);
  // Counts one more stream (an open file reading whole chunks) through multi-chunk file `e` on this node; true when
  // it is not the first, i.e. the file is read again (by another process, or later): worth keeping a copy of.
  bool NoteStream(const Entry& e);
  // Runs `fill` holding an exclusive flock on the node's copy of multi-chunk file `e`: processes assembling a
  // kernel fd of the same file take turns, so the later ones find every chunk there instead of decoding it
  // again. The lock goes with its holder if that process dies.
  Status WithFileLock(const Entry& e, const std::function<Status()>& fill);
  // A read-only fd (flags: O_CLOEXEC) on the node's copy of multi-chunk file `e`, once every chunk is
  // present; kUnsupported otherwise (the caller fills the missing ones, or falls back to a memfd).
  Result<int> OpenComplete(const Entry& e, int flags);

  // Lets go of the files of large files held open for later (each an fd; one still in use closes with its last
  // user); how many there were.
  size_t ReleaseIdle();
  // Every fd the cache keeps is reported to `hook` (those open now, and those opened later).
  void SetInternalFdHook(void (*hook)(int fd));
  // fork: the region table's lock is held across fork() by the forking thread.
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }

  struct Region;  // one data file + its bits (node_cache.cpp)

 private:
  NodeCache(std::string dir, const Image& img, int state_fd, char* state);
  std::shared_ptr<Region> RegionFor(const Entry& e, bool create);
  std::shared_ptr<Region> OpenRegion(const std::string& name, uint64_t data_size, uint64_t bits, bool create);
  bool Reserve(uint64_t bytes, bool must, const std::string& keep);
  void EvictFor(uint64_t bytes, const std::string& keep);
  void Recount();
  std::atomic<uint64_t>& Used();

  const std::string dir_;
  const Image& img_;
  const uint32_t shift_;
  int state_fd_;
  char* state_;  // the shared state page
  void (*hook_)(int) = nullptr;
  std::mutex mu_;  // guards the region table
  std::shared_ptr<Region> small_;
  std::list<uint32_t> lru_;  // multi-chunk regions held open, most recent first
  const size_t max_open_;    // at most this many of them (each holds an fd)
  std::unordered_map<uint32_t, std::pair<std::shared_ptr<Region>, std::list<uint32_t>::iterator>> files_;
  // Files the node had no copy of when last looked for (steady-clock ms): a raw file read chunk by chunk must
  // not cost an open(2) of a missing file per chunk. Looked for again after a second.
  std::unordered_map<uint32_t, uint64_t> absent_;
};

}  // namespace fanstore
