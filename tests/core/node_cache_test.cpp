// The node-wide decoded-chunk cache: shared between processes, one kernel-fd copy per node, never a wrong byte
// when processes are killed mid-read, forked mid-decode or read from many threads; eviction never changes bytes
// under a mapping; the budget holds; the directory goes away with its last run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/client.hpp"
#include "fanstore/node_cache.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "remote_fetcher.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;
constexpr uint32_t kChunk = 64 * 1024;

// A scratch directory on tmpfs when there is one (what the node chunk cache is made for), else under TMPDIR.
class ShmDir {
 public:
  ShmDir() {
    struct stat st;
    std::string base =
        ::stat("/dev/shm", &st) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    std::string t = base + "/fanstore-nctest-XXXXXX";
    if (::mkdtemp(t.data())) path_ = t;
  }
  ~ShmDir() { TempDir::RemoveAll(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits for `pid` with a generous limit (hang detection, not timing): SIGKILL and fail after it.
int WaitExit(pid_t pid, int seconds = 120) {
  int status = 0;
  for (int i = 0; i < seconds * 20; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

class NodeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 6; ++i) {
      files_.push_back(test::TextBytes(5 * kChunk + 1000 * i, 10 + i));  // multi-chunk, zstd
      test::WriteFile(src_ / ("src/big/" + std::to_string(i)), files_.back());
    }
    for (int i = 0; i < 40; ++i)
      test::WriteFile(src_ / ("src/small/" + std::to_string(i)), test::TextBytes(3000 + i, 100 + i));
    ASSERT_TRUE(test::PackTree(src_ / "src", src_ / "img", 1, {}, 2, nullptr, kChunk).ok());
    ASSERT_FALSE(root_.path().empty());
  }
  // Joins the node chunk cache of `image` (the fixture's unless given) for `owner` (the test process unless given).
  std::string Join(uint64_t budget = 0, pid_t owner = ::getpid(), const std::string& image = "") {
    NodeCacheOptions o;
    o.root = root_.path();
    o.budget = budget ? budget : 256ull << 20;
    auto img = test::OpenOrDie(image.empty() ? src_ / "img" : image);
    auto dir = JoinNodeCache(*img, o, owner);
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    return dir.ok() ? *dir : "";
  }
  std::unique_ptr<Client> NewClient(const std::string& node_dir, uint64_t cache_bytes = 256ull << 20,
                                    const std::string& image = "") {
    ClientOptions o;
    o.image = image.empty() ? src_ / "img" : image;
    o.node_cache_dir = node_dir;
    o.cache_bytes = cache_bytes;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  static std::string ReadAll(Client& c, const std::string& rel) {
    auto f = c.Open(*c.Lookup(rel));
    if (!f.ok()) return "<" + f.status().ToString() + ">";
    std::string out((*f)->size(), '\0');
    auto n = (*f)->ReadAt(0, out.data(), out.size());
    if (!n.ok()) return "<" + n.status().ToString() + ">";
    return out;
  }
  TempDir src_;
  ShmDir root_;
  std::vector<std::string> files_;
};

TEST_F(NodeCacheTest, AProcessReadsWhatAnotherDecoded) {
  const std::string dir = Join();
  // Small files are shared from the first read; a large file read whole by one process is not copied until it
  // is read again: the second reader fills the node's copy, every later one reads it.
  for (int reader = 0; reader < 2; ++reader) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto c = NewClient(dir);
      bool ok = c && ReadAll(*c, "big/0") == files_[0] && ReadAll(*c, "small/3") == test::TextBytes(3003, 103);
      const bool small_shared = c->stats().node_hits.load() == (reader == 0 ? 0u : 1u);
      ::_exit(ok && small_shared ? 0 : 1);
    }
    ASSERT_EQ(WaitExit(pid), 0) << "reader " << reader;
  }
  auto c = NewClient(dir);
  EXPECT_EQ(ReadAll(*c, "big/0"), files_[0]);
  EXPECT_EQ(ReadAll(*c, "small/3"), test::TextBytes(3003, 103));
  EXPECT_EQ(c->stats().local_loads.load(), 0u) << "every chunk should have come from the node chunk cache";
  // At least one hit per chunk: a read-ahead that is still copying a chunk when the reader reaches it makes both
  // copy it from the node (two hits for one chunk), so the count is a floor, not an exact figure.
  EXPECT_GE(c->stats().node_hits.load(), 5u + 1u);
}

// A daemon stand-in that serves stored ranges from the image's partition files, and says whether it keeps what it
// fetched node-wide (the daemon's node RAM cache).
class PartitionFetcher : public RemoteFetcher {
 public:
  PartitionFetcher(std::shared_ptr<const Image> img, bool node_wide) : img_(std::move(img)), node_wide_(node_wide) {}
  Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) override {
    std::string buf;
    Status s = test::ReadPartitionRange(*img_, part, offset, length, &buf);
    if (!s.ok()) return s;
    return use(buf.data(), buf.size());
  }
  bool CachesNodeWide() override { return node_wide_; }

 private:
  std::shared_ptr<const Image> img_;
  bool node_wide_;
};

// Whole raw chunks fetched through a daemon that keeps them node-wide are not copied into the node chunk cache a second
// time (another process gets them from the daemon's cache); through one that does not, they are shared here.
TEST_F(NodeCacheTest, RawChunksTheDaemonKeepsAreNotCopiedAgain) {
  for (bool node_wide : {false, true}) {
    // An image of its own per case, different in content: the node chunk cache is named after the image's index.
    const std::string tree = src_ / (node_wide ? "rawsmall1" : "rawsmall0");
    const std::string image = src_ / (node_wide ? "rawsmallimg1" : "rawsmallimg0");
    test::WriteFile(tree + "/a", test::RandomBytes(5000, 1));
    test::WriteFile(tree + "/b", test::RandomBytes(3 * kChunk, 2));
    test::WriteFile(tree + (node_wide ? "/node-wide" : "/not-node-wide"), "case");
    ASSERT_TRUE(test::PackTree(tree, image, 1, {}, 2, nullptr, kChunk, /*level=*/0).ok());
    const std::string dir = Join(0, ::getpid(), image);
    ASSERT_FALSE(dir.empty());
    auto reader = [&]() -> std::unique_ptr<Client> {
      ClientOptions o;
      o.image = image;
      o.partition_dir = src_ / "nothing-here";  // every partition is remote
      o.node_cache_dir = dir;
      o.cache_bytes = 0;
      o.remote = std::make_shared<PartitionFetcher>(test::OpenOrDie(image), node_wide);
      auto c = Client::Create(o);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (!c.ok()) return nullptr;
      EXPECT_EQ(ReadAll(**c, "a"), test::RandomBytes(5000, 1));
      EXPECT_EQ(ReadAll(**c, "b"), test::RandomBytes(3 * kChunk, 2));
      return std::move(c).value();
    };
    auto first = reader();
    auto second = reader();
    ASSERT_TRUE(first && second);
    if (node_wide) {
      EXPECT_EQ(second->stats().node_hits.load(), 0u) << "the daemon keeps them: no second node-wide copy";
      EXPECT_GE(second->stats().remote_loads.load(), 4u);
    } else {
      EXPECT_GE(second->stats().node_hits.load(), 1u) << "no daemon cache: the node chunk cache shares them";
    }
  }
}

// Random parts of a large raw file (fio psync, HDF5 hyperslabs): each part would otherwise pay a pread and the
// checksum of its whole chunk again; the first reader of a chunk shares the verified copy, later parts are copies.
TEST_F(NodeCacheTest, PartsOfARawFileAreVerifiedOncePerNode) {
  const std::string raw = test::RandomBytes(6 * kChunk + 123, 7);
  test::WriteFile(src_ / "rawsrc/r.bin", raw);
  ASSERT_TRUE(test::PackTree(src_ / "rawsrc", src_ / "rawimg", 1, {}, 2, nullptr, kChunk, /*level=*/0).ok());
  const std::string dir = Join(0, ::getpid(), src_ / "rawimg");
  ASSERT_FALSE(dir.empty());
  auto reader = [&](uint64_t* local_loads, uint64_t* node_hits) {
    // No process cache: every part goes to the node chunk cache or the partition.
    auto c = NewClient(dir, /*cache_bytes=*/0, src_ / "rawimg");
    ASSERT_TRUE(c);
    auto f = c->Open(*c->Lookup("r.bin"));
    ASSERT_TRUE(f.ok());
    std::mt19937 rng(5);
    char buf[4096];
    for (int i = 0; i < 200; ++i) {
      const uint64_t off = rng() % (raw.size() - sizeof buf);
      auto n = (*f)->ReadAt(off, buf, sizeof buf);
      ASSERT_TRUE(n.ok());
      ASSERT_EQ(*n, sizeof buf);
      ASSERT_EQ(std::string(buf, sizeof buf), raw.substr(off, sizeof buf)) << "at " << off;
    }
    *local_loads = c->stats().local_loads.load();
    *node_hits = c->stats().node_hits.load();
  };
  uint64_t loads = 0, hits = 0;
  reader(&loads, &hits);
  EXPECT_LE(loads, 7u) << "each of the 7 chunks verified at most once";
  EXPECT_GE(hits, 200u - 7u);
  reader(&loads, &hits);
  EXPECT_EQ(loads, 0u) << "a second reader finds every chunk on the node";
  EXPECT_GE(hits, 200u) << "every part (one spanning two chunks counts twice) from the node";
}

TEST_F(NodeCacheTest, KernelFdsOfALargeFileAreOneSharedCopy) {
  const std::string dir = Join();
  constexpr int kProcs = 4;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pipefd[0]);
      auto c = NewClient(dir);
      auto fd = c->OpenFd(*c->Lookup("big/2"), O_RDONLY);
      if (!fd.ok()) ::_exit(2);
      struct stat st;
      ::fstat(*fd, &st);
      void* m = ::mmap(nullptr, files_[2].size(), PROT_READ, MAP_SHARED, *fd, 0);
      bool same = m != MAP_FAILED && std::memcmp(m, files_[2].data(), files_[2].size()) == 0;
      uint64_t ino = st.st_ino;
      if (::write(pipefd[1], &ino, sizeof ino) != sizeof ino) ::_exit(3);
      ::_exit(same ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(pipefd[1]);
  std::vector<uint64_t> inos(kProcs);
  for (int p = 0; p < kProcs; ++p) ASSERT_EQ(::read(pipefd[0], &inos[p], 8), 8);
  ::close(pipefd[0]);
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  for (int p = 1; p < kProcs; ++p)
    EXPECT_EQ(inos[p], inos[0]) << "every process must map the same node-chunk-cache file";
}

TEST_F(NodeCacheTest, ProcessesKilledMidReadLeaveNoWrongBytes) {
  const std::string dir = Join();
  std::mt19937 rng(3);
  for (int round = 0; round < 12; ++round) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto c = NewClient(dir, 0);  // no process cache: every chunk goes through the node chunk cache
      for (int k = 0;; ++k) {
        const int i = k % 6;
        auto f = c->Open(*c->Lookup("big/" + std::to_string(i)));
        if (f.ok() && (k % 3 == 0)) (void)(*f)->KernelFd(O_CLOEXEC);
        std::string out(3 * kChunk, '\0');
        if (f.ok()) (void)(*f)->ReadAt(k * 4096 % kChunk, out.data(), out.size());
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int st;
    ::waitpid(pid, &st, 0);
  }
  auto c = NewClient(dir, 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ReadAll(*c, "big/" + std::to_string(i)), files_[i]) << i;
  for (int i = 0; i < 6; ++i) {
    auto fd = c->OpenFd(*c->Lookup("big/" + std::to_string(i)), O_RDONLY);
    ASSERT_TRUE(fd.ok());
    std::string got(files_[i].size(), '\0');
    ASSERT_EQ(::pread(*fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    EXPECT_EQ(got, files_[i]) << "kernel fd of big/" << i;
    ::close(*fd);
  }
}

TEST_F(NodeCacheTest, ForkWhileDecodeThreadsAreBusy) {
  const std::string dir = Join();
  auto c = NewClient(dir, 1 << 20);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    for (int k = 0; !stop; ++k) {
      auto f = c->Open(*c->Lookup("big/" + std::to_string(k % 6)));
      if (!f.ok()) continue;
      std::string buf(4096, '\0');
      for (uint64_t off = 0; off < (*f)->size(); off += 4096) (void)(*f)->ReadAt(off, buf.data(), buf.size());
    }
  });
  for (int round = 0; round < 8; ++round) {
    c->AtForkPrepare();
    pid_t pid = ::fork();
    if (pid == 0) {
      c->AtForkChild();
      bool ok = true;
      for (int i = 0; i < 6; ++i) ok = ok && ReadAll(*c, "big/" + std::to_string(i)) == files_[i];
      ::_exit(ok ? 0 : 1);
    }
    c->AtForkParent();
    EXPECT_EQ(WaitExit(pid), 0) << "round " << round << " (-1: the child hung)";
  }
  stop = true;
  reader.join();
}

TEST_F(NodeCacheTest, ManyThreadsAcrossFiles) {
  const std::string dir = Join();
  auto c = NewClient(dir, 2 << 20);
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int k = 0; k < 150; ++k) {
        const int i = static_cast<int>(rng() % 6);
        auto f = c->Open(*c->Lookup("big/" + std::to_string(i)));
        if (!f.ok()) {
          ++bad;
          continue;
        }
        const uint64_t off = rng() % files_[i].size();
        const size_t len = rng() % (2 * kChunk);
        std::string out(len, '\0');
        auto n = (*f)->ReadAt(off, out.data(), len);
        if (!n.ok() || out.substr(0, *n) != files_[i].substr(off, len)) ++bad;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(NodeCacheTest, EvictionNeverChangesBytesUnderAMapping) {
  // Room for about one large file: kernel fds of the others evict it while it is mapped.
  const std::string dir = Join(files_[0].size() + 2 * kChunk);
  auto c = NewClient(dir, 0);
  auto fd0 = c->OpenFd(*c->Lookup("big/0"), O_RDONLY);
  ASSERT_TRUE(fd0.ok());
  const size_t n0 = files_[0].size();
  void* m = ::mmap(nullptr, n0, PROT_READ, MAP_SHARED, *fd0, 0);
  ASSERT_NE(m, MAP_FAILED);
  struct stat before;
  ASSERT_EQ(::fstat(*fd0, &before), 0);
  for (int i = 1; i < 6; ++i) {
    auto fd = c->OpenFd(*c->Lookup("big/" + std::to_string(i)), O_RDONLY);
    ASSERT_TRUE(fd.ok());
    ::close(*fd);
  }
  struct stat after;
  ASSERT_EQ(::fstat(*fd0, &after), 0);
  EXPECT_EQ(after.st_nlink, 0u) << "big/0 should have been evicted (unlinked) to make room";
  EXPECT_EQ(std::memcmp(m, files_[0].data(), n0), 0) << "bytes changed under a mapping";
  ::munmap(m, n0);
  ::close(*fd0);
  auto again = c->OpenFd(*c->Lookup("big/0"), O_RDONLY);  // made afresh
  ASSERT_TRUE(again.ok());
  std::string got(n0, '\0');
  ASSERT_EQ(::pread(*again, got.data(), n0, 0), static_cast<ssize_t>(n0));
  EXPECT_EQ(got, files_[0]);
  ::close(*again);
}

TEST_F(NodeCacheTest, ReadsStopFillingAtTheBudget) {
  const uint64_t budget = 3 * kChunk;
  const std::string dir = Join(budget);
  auto c = NewClient(dir, 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ReadAll(*c, "big/" + std::to_string(i)), files_[i]);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(ReadAll(*c, "small/" + std::to_string(i)), test::TextBytes(3000 + i, 100 + i));
  uint64_t used = 0;
  for (const char* f : {"small.data"}) {
    struct stat st;
    if (::stat((dir + "/" + f).c_str(), &st) == 0) used += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  for (int i = 0; i < 100; ++i) {
    struct stat st;
    if (::stat((dir + "/f" + std::to_string(i) + ".data").c_str(), &st) == 0)
      used += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_LE(used, budget) << "plain reads must not fill the node chunk cache past its budget";
  EXPECT_GT(used, 0u);
}

TEST_F(NodeCacheTest, TheLastRunRemovesTheDirectory) {
  // Two "runs" (owners), each a process we control; the directory must outlive the first and not the second.
  int gate[2][2];
  ASSERT_EQ(::pipe(gate[0]), 0);
  ASSERT_EQ(::pipe(gate[1]), 0);
  pid_t owners[2];
  for (int k = 0; k < 2; ++k) {
    owners[k] = ::fork();
    if (owners[k] == 0) {
      char x;
      ::close(gate[k][1]);
      if (k == 1) ::close(gate[0][1]);  // only the test may hold the other owner's gate open
      (void)::read(gate[k][0], &x, 1);  // lives until the test closes the pipe
      ::_exit(0);
    }
    ::close(gate[k][0]);
  }
  const std::string dir = Join(0, owners[0]);
  ASSERT_EQ(Join(0, owners[1]), dir);
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  auto gone = [&] {
    for (int i = 0; i < 200; ++i) {
      if (::stat(dir.c_str(), &st) != 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  ::close(gate[0][1]);
  EXPECT_EQ(WaitExit(owners[0]), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(::stat(dir.c_str(), &st), 0) << "removed while another run still uses it";
  ::close(gate[1][1]);
  EXPECT_EQ(WaitExit(owners[1]), 0);
  EXPECT_TRUE(gone()) << dir << " is still there after its last run ended";
}

TEST_F(NodeCacheTest, AttachRefusesTheCacheOfAnotherImage) {
  const std::string dir = Join();
  TempDir other;
  test::WriteFile(other / "src/x", "x");
  ASSERT_TRUE(test::PackTree(other / "src", other / "img").ok());
  ClientOptions o;
  o.image = other / "img";
  o.node_cache_dir = dir;
  auto c = Client::Create(o);  // works, without the node chunk cache (one warning line)
  ASSERT_TRUE(c.ok());
  auto f = (*c)->Open(*(*c)->Lookup("x"));
  ASSERT_TRUE(f.ok());
  char b;
  ASSERT_TRUE((*f)->ReadAt(0, &b, 1).ok());
  EXPECT_EQ(b, 'x');
}

}  // namespace
}  // namespace fanstore

namespace fanstore {
namespace {

// An index edited in place keeps its stored image id; it must still get a node chunk cache of its own, or one image's
// verified chunks would be served as the other's (entry ids and checksums differ).
TEST_F(NodeCacheTest, AnEditedIndexGetsACacheOfItsOwn) {
  const std::string original = Join();
  TempDir copy;
  for (const char* n : {"index.fsi", "part-00000.fsp"})
    test::WriteFile(copy / n, test::ReadAll(src_ / ("img/" + std::string(n))));
  std::string b = test::ReadAll(copy / "index.fsi");
  using namespace format;
  const uint64_t at = Load64(b.data() + hdr::kEntriesOff) + 3 * kEntrySize + ent::kMtimeSec;
  Store64(b.data() + at, Load64(b.data() + at) + 1);
  Store64(b.data() + hdr::kBodyXxh3, XXH3_64bits(b.data() + kHeaderSize, b.size() - kHeaderSize));
  Store64(b.data() + hdr::kHeaderXxh3, XXH3_64bits(b.data(), hdr::kHeaderXxh3));
  test::Overwrite(copy / "index.fsi", b);
  auto edited = test::OpenOrDie(copy.path());
  ASSERT_TRUE(edited);
  EXPECT_EQ(edited->ImageId(), test::OpenOrDie(src_ / "img")->ImageId());
  NodeCacheOptions o;
  o.root = root_.path();
  o.budget = 64 << 20;
  auto dir = JoinNodeCache(*edited, o, ::getpid());
  ASSERT_TRUE(dir.ok());
  EXPECT_NE(*dir, original);
  ClientOptions co;
  co.image = copy.path();
  co.node_cache_dir = original;  // handed the other image's cache by mistake: refused, reads still right
  auto c = Client::Create(co);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ReadAll(**c, "big/1"), files_[1]);
}

}  // namespace
}  // namespace fanstore
