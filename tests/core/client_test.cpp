// fanstore::Client: range reads, real fds with the file's bytes, the memfd cache, what a program can do to our fds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/client.hpp"
#include "remote_fetcher.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;

// Reads everything from fd at its current offset.
std::string Drain(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// The fd numbers of this process that are memfds made by fanstore.
std::set<int> MemfdsOpen() {
  std::set<int> out;
  for (int fd = 0; fd < 1024; ++fd) {
    char link[64], target[256];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strncmp(target, "/memfd:fanstore", 15) == 0) out.insert(fd);
  }
  return out;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::MakeDirs(src_.path() + "/d");
    small_ = test::TextBytes(1000, 1);
    big_ = test::TextBytes(300 * 1024, 2);    // compressible: zstd
    raw_ = test::RandomBytes(200 * 1024, 3);  // incompressible: stored raw
    test::WriteFile(src_.path() + "/d/small.txt", small_);
    test::WriteFile(src_.path() + "/d/big.bin", big_);
    test::WriteFile(src_.path() + "/d/raw.bin", raw_);
    ASSERT_TRUE(test::PackTree(src_.path(), img_.path() + "/img", 2).ok());
    ClientOptions o;
    o.image = img_.path() + "/img";
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  uint32_t Id(const std::string& rel) {
    auto r = client_->Lookup(rel);
    EXPECT_TRUE(r.ok()) << rel;
    return r.ok() ? *r : 0;
  }
  TempDir src_, img_;
  std::string small_, big_, raw_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, OpenFdHoldsTheFileBytesReadOnly) {
  for (const char* rel : {"d/small.txt", "d/big.bin"}) {
    for (int round = 0; round < 2; ++round) {  // second round: served from the cache
      auto fd = client_->OpenFd(Id(rel), O_RDONLY);
      ASSERT_TRUE(fd.ok()) << fd.status().ToString();
      EXPECT_EQ(Drain(*fd), std::string(rel) == "d/big.bin" ? big_ : small_);
      EXPECT_EQ(fcntl(*fd, F_GETFL) & O_ACCMODE, O_RDONLY);
      EXPECT_EQ(write(*fd, "x", 1), -1);
      close(*fd);
    }
  }
  EXPECT_FALSE(client_->OpenFd(Id("d/big.bin"), O_RDWR).ok());
}

TEST_F(ClientTest, LoadRangeReadsAndRealFdsAgree) {
  auto bytes = client_->Load(Id("d/raw.bin"));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(std::string((*bytes)->data(), (*bytes)->size()), raw_);
  auto f = client_->Open(Id("d/raw.bin"));
  ASSERT_TRUE(f.ok());
  std::string piece(777, '\0');
  auto n = (*f)->ReadAt(1234, piece.data(), piece.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, piece.size());
  EXPECT_EQ(piece, raw_.substr(1234, 777));
  n = (*f)->ReadAt(raw_.size() - 10, piece.data(), piece.size());  // clipped at the end
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 10u);
  n = (*f)->ReadAt(raw_.size() + 5, piece.data(), piece.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  auto fd = client_->OpenFd(Id("d/raw.bin"), O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(Drain(*fd), raw_);
  close(*fd);
}

TEST_F(ClientTest, FlippedByteInARawFileIsCorruptNotServed) {
  Entry e = client_->image().Get(Id("d/raw.bin"));
  ASSERT_EQ(e.codec, Codec::kRaw);
  const std::string part = client_->image().PartitionPath(e.part);
  int pfd = open(part.c_str(), O_RDWR);
  ASSERT_GE(pfd, 0);
  char c;
  ASSERT_EQ(pread(pfd, &c, 1, static_cast<off_t>(e.offset + 1000)), 1);
  c ^= 0x10;
  ASSERT_EQ(pwrite(pfd, &c, 1, static_cast<off_t>(e.offset + 1000)), 1);
  close(pfd);
  ClientOptions o;
  o.image = client_->image().dir();
  auto fresh = Client::Create(o);  // a new client: nothing cached
  ASSERT_TRUE(fresh.ok());
  auto r = (*fresh)->Load((*fresh)->Lookup("d/raw.bin").value());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_EQ((*fresh)->OpenFd((*fresh)->Lookup("d/raw.bin").value(), O_RDONLY).status().code(), Code::kCorrupt);
}

TEST_F(ClientTest, EachOpenHasItsOwnOffset) {
  auto a = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  auto b = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  ASSERT_TRUE(a.ok() && b.ok());
  char x[100];
  ASSERT_EQ(read(*a, x, sizeof x), 100);
  EXPECT_EQ(Drain(*b), big_);
  close(*a);
  close(*b);
}

// A program may dup2 its own file onto the number of our cached memfd: we must notice (recorded inode),
// serve the true bytes anyway, and never close the program's fd.
TEST_F(ClientTest, ReplacedCachedMemfdIsDetectedAndNotClosed) {
  std::set<int> before = MemfdsOpen();
  auto first = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  ASSERT_TRUE(first.ok());
  std::set<int> after = MemfdsOpen();
  after.erase(*first);
  for (int fd : before) after.erase(fd);
  ASSERT_EQ(after.size(), 1u) << "the client keeps exactly one memfd of the file";
  const int cached = *after.begin();
  close(*first);
  TempDir other;
  test::WriteFile(other.path() + "/x", "not the image file");
  int theirs = open((other.path() + "/x").c_str(), O_RDONLY);
  ASSERT_GE(theirs, 0);
  ASSERT_EQ(dup2(theirs, cached), cached);
  close(theirs);
  auto fd = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(Drain(*fd), big_);
  close(*fd);
  client_.reset();  // destroying the cache must leave the program's fd open
  EXPECT_NE(fcntl(cached, F_GETFD), -1) << "the program's fd was closed";
  close(cached);
}

// Nobody can change a cached file after its checksum held: the memfd is write-sealed.
TEST_F(ClientTest, CachedMemfdCannotBeWrittenThroughProc) {
  auto fd = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  ASSERT_TRUE(fd.ok());
  std::string proc = "/proc/self/fd/" + std::to_string(*fd);
  int w = open(proc.c_str(), O_RDWR);
  if (w >= 0) {
    EXPECT_EQ(pwrite(w, "CORRUPT!", 8, 0), -1);
    close(w);
  }
  close(*fd);
  auto again = client_->OpenFd(Id("d/big.bin"), O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Drain(*again), big_);
  close(*again);
  auto bytes = client_->Load(Id("d/big.bin"));
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::string((*bytes)->data(), (*bytes)->size()), big_);
}

TEST_F(ClientTest, FillStatMatchesTheImage) {
  struct stat st;
  client_->FillStat(Id("d/big.bin"), &st);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(static_cast<size_t>(st.st_size), big_.size());
  EXPECT_NE(st.st_ino, 0u);
  client_->FillStat(Id("d"), &st);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(client_->Lookup("d/big.bin/x").status().code(), Code::kNotDirectory);
  EXPECT_EQ(client_->Lookup("d/missing").status().code(), Code::kNotFound);
  EXPECT_EQ(client_->Load(Id("d")).status().code(), Code::kIsDirectory);
}

}  // namespace
}  // namespace fanstore

namespace fanstore {
namespace {

// A daemon stand-in: serves the stored bytes of another open of the image, counting what it is asked.
class FakeFetcher : public RemoteFetcher {
 public:
  explicit FakeFetcher(std::shared_ptr<const Image> img) : img_(std::move(img)) {}
  Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) override {
    ++ranged;
    {
      std::lock_guard<std::mutex> g(mu_);
      offsets_.push_back(offset);
    }
    std::string buf;
    Status s = test::ReadPartitionRange(*img_, part, offset, length, &buf);
    if (!s.ok()) return s;
    if (flip && length) buf[length / 2] ^= 1;
    return use(buf.data(), buf.size());
  }
  // The node-wide cache: holds every range (cache_ == kGood), or a damaged copy of it (kBad: a cache clobbered,
  // or a descriptor the program reused for a file of its own).
  enum Cache { kNone, kGood, kBad };
  bool CopyCached(uint32_t part, uint64_t offset, uint64_t length, char* dst) override {
    if (cache == kNone) return false;
    ++cached;
    std::string buf;
    if (!test::ReadPartitionRange(*img_, part, offset, length, &buf).ok()) return false;
    if (cache == kBad && length) buf[length / 2] ^= 1;
    std::memcpy(dst, buf.data(), buf.size());
    return true;
  }
  std::atomic<int> ranged{0}, cached{0};  // bumped by the reader and the decode threads
  bool flip = false;
  Cache cache = kNone;
  // The partition offsets of the ranges fetched (WithStored), in order.
  std::vector<uint64_t> Offsets() {
    std::lock_guard<std::mutex> g(mu_);
    return offsets_;
  }

 private:
  std::shared_ptr<const Image> img_;
  std::mutex mu_;
  std::vector<uint64_t> offsets_;
};

// A client of the image at `image` with every partition remote, read through `fetcher`.
Result<std::unique_ptr<Client>> AllRemoteClient(const std::string& image, std::shared_ptr<RemoteFetcher> fetcher) {
  ClientOptions o;
  o.image = image;
  o.partition_dir = image + "-none-here";  // no partition is on this node
  o.remote = std::move(fetcher);
  return Client::Create(o);
}

TEST(RemoteChunksTest, SmallReadsFetchEachChunkOnceAndDamagedBytesAreNeverServed) {
  TempDir src, img;
  const std::string big = test::TextBytes(6 * 65536 + 5, 9);
  test::WriteFile(src / "big.txt", big);
  ASSERT_TRUE(test::PackTree(src.path(), img / "i", 1, {}, 2, nullptr, 65536).ok());
  auto fetcher = std::make_shared<FakeFetcher>(test::OpenOrDie(img / "i"));
  auto c = AllRemoteClient(img / "i", fetcher);
  ASSERT_TRUE(c.ok());
  auto f = (*c)->Open(*(*c)->Lookup("big.txt"));
  ASSERT_TRUE(f.ok());
  std::string out(big.size(), '\0');
  for (uint64_t off = 0; off < big.size(); off += 4096) {  // small reads: chunk after chunk
    auto n = (*f)->ReadAt(off, out.data() + off, 4096);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
  }
  EXPECT_EQ(out, big);
  EXPECT_EQ(fetcher->ranged, 7) << "one fetch per chunk (6 whole and the 5-byte last one), not one per read";
  EXPECT_GT((*c)->stats().remote_loads.load(), 0u);
  // Bytes damaged on the way are EIO, never served: chunks are decoded straight from the fetcher's view.
  auto damaged = std::make_shared<FakeFetcher>(test::OpenOrDie(img / "i"));
  damaged->flip = true;
  auto d = AllRemoteClient(img / "i", damaged);
  auto g = (*d)->Open(*(*d)->Lookup("big.txt"));
  ASSERT_TRUE(g.ok());
  auto n = (*g)->ReadAt(0, out.data(), out.size());
  EXPECT_EQ(n.status().code(), Code::kCorrupt);
}

// A daemon whose read of the image directory found the partition gone answers kNotFound (an older daemon did;
// ENOENT from open(2) there): the reader gets EIO, never ENOENT for a file stat shows (read(2) has no ENOENT).
// kPermission alike.
TEST(RemoteChunksTest, AFailedRemoteReadIsEioWhateverCodeTheDaemonSent) {
  class RefusingFetcher : public RemoteFetcher {
   public:
    explicit RefusingFetcher(Code c) : code_(c) {}
    Status WithStored(uint32_t, uint64_t, uint64_t, const StoredUse&) override {
      return Status(code_, "open IMG/part-00000.fsp: No such file or directory");
    }

   private:
    Code code_;
  };
  TempDir src, img;
  test::WriteFile(src / "a.txt", test::TextBytes(3 * 65536, 5));
  ASSERT_TRUE(test::PackTree(src.path(), img / "i", 1, {}, 2, nullptr, 65536).ok());
  for (Code code : {Code::kNotFound, Code::kPermission, Code::kNotDirectory}) {
    auto c = AllRemoteClient(img / "i", std::make_shared<RefusingFetcher>(code));
    ASSERT_TRUE(c.ok());
    auto f = (*c)->Open(*(*c)->Lookup("a.txt"));
    ASSERT_TRUE(f.ok());
    std::string out(3 * 65536, '\0');
    for (size_t n : {size_t{100}, out.size()}) {  // one chunk, and several fetched in parallel
      auto r = (*f)->ReadAt(0, out.data(), n);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Code::kIoError) << CodeName(code) << ": " << r.status().ToString();
      EXPECT_EQ(ToErrno(r.status()), EIO);
      EXPECT_NE(r.status().message().find("No such file or directory"), std::string::npos) << "the reason stays";
    }
  }
}

// Raw chunks the node-wide cache holds are copied straight into the reader's memory and checked there: no fetch.
// A copy that fails its check is fetched instead (the right bytes, never an error); compressed chunks are always
// decoded from a fetch's view.
TEST(RemoteChunksTest, RawChunksInTheNodeCacheAreCopiedAndCheckedAndABadCopyIsFetched) {
  TempDir src, img;
  const std::string raw = test::RandomBytes(5 * 65536 + 7, 3), text = test::TextBytes(3 * 65536, 4);
  test::WriteFile(src / "raw.bin", raw);
  test::WriteFile(src / "text.txt", text);
  ASSERT_TRUE(test::PackTree(src.path(), img / "i", 1, {}, 2, nullptr, 65536).ok());
  for (auto cache : {FakeFetcher::kGood, FakeFetcher::kBad}) {
    auto fetcher = std::make_shared<FakeFetcher>(test::OpenOrDie(img / "i"));
    fetcher->cache = cache;
    auto c = AllRemoteClient(img / "i", fetcher);
    ASSERT_TRUE(c.ok());
    for (const auto& [name, want] : {std::pair<std::string, std::string>{"raw.bin", raw}, {"text.txt", text}}) {
      auto f = (*c)->Open(*(*c)->Lookup(name));
      ASSERT_TRUE(f.ok());
      std::string out(want.size(), '\0');
      auto n = (*f)->ReadAt(0, out.data(), out.size());  // whole chunks: into this buffer directly
      ASSERT_TRUE(n.ok()) << name << ": " << n.status().ToString();
      EXPECT_EQ(out, want) << name;
    }
    EXPECT_EQ(fetcher->cached, 6) << "each of raw.bin's 6 chunks is looked up in the fetch cache once";
    if (cache == FakeFetcher::kGood) EXPECT_EQ(fetcher->ranged, 3) << "only text.txt's 3 compressed chunks are fetched";
    else EXPECT_EQ(fetcher->ranged, 9) << "every raw chunk whose cached copy failed its check is fetched";
    EXPECT_EQ((*c)->stats().errors.load(), 0u);
  }
}

// One read spanning a file's chunks (a whole file read at once): every chunk is fetched once, the whole ones
// straight into the caller's buffer in parallel, a cached one is not fetched again, and damaged bytes leave no
// byte of the buffer unchecked.
TEST(RemoteChunksTest, AReadSpanningChunksFetchesEachOnceAndLeavesNoUncheckedByte) {
  TempDir src, img;
  const std::string raw = test::RandomBytes(6 * 65536 + 5, 5), text = test::TextBytes(6 * 65536 + 5, 6);
  test::WriteFile(src / "raw.bin", raw);
  test::WriteFile(src / "text.txt", text);
  ASSERT_TRUE(test::PackTree(src.path(), img / "i", 1, {}, 2, nullptr, 65536).ok());
  for (const auto& [name, want] : {std::pair<std::string, std::string>{"raw.bin", raw}, {"text.txt", text}}) {
    auto fetcher = std::make_shared<FakeFetcher>(test::OpenOrDie(img / "i"));
    auto c = AllRemoteClient(img / "i", fetcher);
    ASSERT_TRUE(c.ok());
    auto f = (*c)->Open(*(*c)->Lookup(name));
    ASSERT_TRUE(f.ok());
    std::string out(want.size(), '\0');
    auto n = (*f)->ReadAt(0, out.data(), out.size());
    ASSERT_TRUE(n.ok()) << name << ": " << n.status().ToString();
    EXPECT_EQ(out, want) << name;
    EXPECT_EQ(fetcher->ranged, 7) << name << ": 6 whole chunks and the 5-byte last one, each once";

    // Chunk 2 read in part (so it is cached), then an unaligned read over chunks 1-6: chunk 2 comes from the cache.
    auto g = (*c)->Open(*(*c)->Lookup(name));
    ASSERT_TRUE(g.ok());
    std::string part(100, '\0');
    ASSERT_TRUE((*g)->ReadAt(2 * 65536 + 10, part.data(), part.size()).ok());
    EXPECT_EQ(part, want.substr(2 * 65536 + 10, 100));
    const size_t before = fetcher->Offsets().size();
    std::string tail(want.size() - 65536 - 3, '\0');
    n = (*g)->ReadAt(65536 + 3, tail.data(), tail.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(tail, want.substr(65536 + 3)) << name;
    auto chunk2 = (*c)->image().GetChunk((*c)->image().Get(*(*c)->Lookup(name)), 2);
    ASSERT_TRUE(chunk2.ok());
    const std::vector<uint64_t> fetched = fetcher->Offsets();
    EXPECT_EQ(std::count(fetched.begin() + static_cast<std::ptrdiff_t>(before), fetched.end(), chunk2->offset), 0)
        << name << ": chunk 2 was cached and must not be fetched again";
  }
  auto fetcher = std::make_shared<FakeFetcher>(test::OpenOrDie(img / "i"));
  fetcher->flip = true;
  auto c = AllRemoteClient(img / "i", fetcher);
  auto f = (*c)->Open(*(*c)->Lookup("raw.bin"));
  ASSERT_TRUE(f.ok());
  std::string out(raw.size(), 'x');
  auto n = (*f)->ReadAt(0, out.data(), out.size());
  EXPECT_EQ(n.status().code(), Code::kCorrupt);
  EXPECT_EQ(out, std::string(raw.size(), '\0')) << "a failed read must leave no unchecked byte in the buffer";
}

// A daemon stand-in whose fetches from the decode threads wait while `hold` is set, so that read-ahead
// queued behind them is still queued when the reader gets there. Records who fetched which offset.
class GatedFetcher : public RemoteFetcher {
 public:
  explicit GatedFetcher(std::shared_ptr<const Image> img) : img_(std::move(img)), main_(std::this_thread::get_id()) {}
  Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) override {
    {
      std::unique_lock<std::mutex> lk(mu_);
      const bool reader = std::this_thread::get_id() == main_;
      fetched_.push_back({offset, reader});
      if (!reader && hold_) {
        ++blocked_;
        cv_.notify_all();
        cv_.wait(lk, [&] { return !hold_; });
        --blocked_;
      }
      cv_.notify_all();
    }
    std::string buf;
    Status s = test::ReadPartitionRange(*img_, part, offset, length, &buf);
    return s.ok() ? use(buf.data(), buf.size()) : s;
  }
  void Hold(bool on) {
    std::lock_guard<std::mutex> lk(mu_);
    hold_ = on;
    cv_.notify_all();
  }
  // Waits (10 s at most) until `pred` holds over what was fetched so far.
  bool WaitFor(const std::function<bool(int blocked, const std::vector<std::pair<uint64_t, bool>>&)>& pred) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(10), [&] { return pred(blocked_, fetched_); });
  }
  // Fetches of stored bytes in [from, to): by the reading thread, and by the decode threads.
  std::pair<int, int> Count(uint64_t from, uint64_t to) {
    std::lock_guard<std::mutex> lk(mu_);
    std::pair<int, int> n{0, 0};
    for (auto& [off, reader] : fetched_)
      if (off >= from && off < to) ++(reader ? n.first : n.second);
    return n;
  }

 private:
  std::shared_ptr<const Image> img_;
  const std::thread::id main_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  int blocked_ = 0;
  std::vector<std::pair<uint64_t, bool>> fetched_;
};

// A read-ahead decode still queued when the reader reaches its chunk must not fetch it again after the reader
// has loaded and consumed it (the reader loads what it reaches; the queued decode stands down).
TEST(RemoteChunksTest, ReadAheadTheReaderOvertookFetchesNothing) {
  TempDir src, img;
  for (const char* name : {"a.txt", "b.txt", "c.txt"})
    test::WriteFile(src / name, test::TextBytes(6 * 65536 + 5, name[0]));
  ASSERT_TRUE(test::PackTree(src.path(), img / "i", 1, {}, 2, nullptr, 65536).ok());
  auto fetcher = std::make_shared<GatedFetcher>(test::OpenOrDie(img / "i"));
  auto c = AllRemoteClient(img / "i", fetcher);
  ASSERT_TRUE(c.ok());
  auto entry = [&](const char* p) { return (*c)->image().Get(*(*c)->Lookup(p)); };
  char buf[4096];
  auto start_stream = [&](OpenFile& f) {  // two sequential reads start the read-ahead
    ASSERT_TRUE(f.ReadAt(0, buf, sizeof buf).ok());
    ASSERT_TRUE(f.ReadAt(sizeof buf, buf, sizeof buf).ok());
  };
  // Every decode thread busy with b.txt's read-ahead, held in its fetch.
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  fetcher->Hold(true);
  auto b = (*c)->Open(entry("b.txt").id);
  ASSERT_TRUE(b.ok());
  start_stream(**b);
  ASSERT_TRUE(fetcher->WaitFor([&](int blocked, auto&) { return blocked == threads; }))
      << "decode threads never fetched";
  // a.txt read to its end: all its read-ahead is queued behind b's, so the reader loads every chunk itself.
  const Entry a_entry = entry("a.txt");
  auto a = (*c)->Open(a_entry.id);
  ASSERT_TRUE(a.ok());
  for (uint64_t off = 0; off < a_entry.size; off += sizeof buf) ASSERT_TRUE((*a)->ReadAt(off, buf, sizeof buf).ok());
  EXPECT_EQ(fetcher->Count(a_entry.offset, a_entry.offset + a_entry.stored_size), std::make_pair(7, 0));
  // Release the threads; c.txt's read-ahead, queued after a's, marks when a's queued decodes have had their turn.
  const Entry c_entry = entry("c.txt");
  auto cf = (*c)->Open(c_entry.id);
  ASSERT_TRUE(cf.ok());
  start_stream(**cf);
  fetcher->Hold(false);
  ASSERT_TRUE(fetcher->WaitFor([&](int, auto& fetched) {
    int n = 0;
    for (auto& [off, reader] : fetched)
      n += !reader && off >= c_entry.offset && off < c_entry.offset + c_entry.stored_size;
    return n >= std::min(6, 2 * threads);  // all of it: by then every decode queued before it has had its turn
  })) << "c.txt's read-ahead never ran";
  EXPECT_EQ(fetcher->Count(a_entry.offset, a_entry.offset + a_entry.stored_size), std::make_pair(7, 0))
      << "a read-ahead decode fetched a chunk its reader had already loaded";
}

}  // namespace
}  // namespace fanstore
