// Staging's pieces (stage_layout), who reads each one (placement), the reader that serves a partition while it is
// staged (StagedReader), the paced reads of the image directory (ImageDirReader) and the readers' reads of it off
// the progress thread (ImageDirReads), with a daemon's router over a hung one. MPI-free.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_protocol.hpp"
#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"
#include "fetch_cache.hpp"
#include "fetch_router.hpp"
#include "image_dir_reader.hpp"
#include "placement.hpp"
#include "socket_server.hpp"
#include "stage_layout.hpp"
#include "staged_reader.hpp"
#include "staging.hpp"
#include "stats.hpp"
#include "test_util.hpp"

namespace fanstore::daemon {
namespace {

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    const std::string src = tmp_ / "src";
    uint32_t seed = 11;
    // Files of many sizes, half compressible, some of several 64 KiB chunks, a hard link (stored once) and a
    // sparse file (chunks of zeros: nothing stored).
    for (int i = 0; i < 40; ++i) {
      std::string bytes(static_cast<size_t>(1000 + i * 9000), '\0');
      for (size_t k = 0; k < bytes.size(); ++k)
        bytes[k] = i % 2 ? static_cast<char>(k % 7) : static_cast<char>((seed = seed * 1103515245u + 12345u) >> 16);
      test::WriteFile(src + "/f" + std::to_string(i), bytes);
    }
    ASSERT_EQ(link((src + "/f3").c_str(), (src + "/hard").c_str()), 0);
    test::WriteFile(src + "/sparse", std::string(300000, '\0') + "end");
    auto packed = test::PackTree(src, tmp_ / "img", 2, {}, 1, nullptr, 64 << 10);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    img_ = test::OpenOrDie(tmp_ / "img");
    for (uint32_t p = 0; p < img_->PartitionCount(); ++p) {
      parts_.push_back(p);
      bytes_.push_back(test::ReadAll(img_->PartitionPath(p)));
      sizes_.push_back(bytes_.back().size());
    }
  }
  test::TempDir tmp_;
  std::string dir_;
  std::shared_ptr<const Image> img_;
  std::vector<uint32_t> parts_;
  std::vector<std::string> bytes_;
  std::vector<uint64_t> sizes_;
};

TEST_F(StagingTest, PiecesTileEachPartitionAtChunkBoundariesAndVerify) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok()) << layouts.status().ToString();
  std::vector<char> scratch;
  for (size_t i = 0; i < layouts->size(); ++i) {
    const PartLayout& l = (*layouts)[i];
    ASSERT_GT(l.pieces(), 2u) << "partition " << l.part;
    EXPECT_EQ(l.piece_ends.back(), l.size);
    for (size_t k = 0; k < l.pieces(); ++k) {
      ASSERT_LT(l.begin(k), l.piece_ends[k]);
      if (k + 1 < l.pieces()) {
        EXPECT_GE(l.length(k), 100u << 10) << "piece " << k << " is short";
      }
      EXPECT_TRUE(VerifyPiece(*img_, l, k, bytes_[i].data() + l.begin(k), &scratch).ok()) << "piece " << k;
    }
    // Piece ends are chunk starts: every chunk lies inside one piece (VerifyPiece checks), and every unit is in one.
    EXPECT_EQ(l.piece_units.back(), l.units.size());
  }
}

TEST_F(StagingTest, ADamagedByteOrHeaderIsRefused) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok());
  const PartLayout& l = (*layouts)[0];
  std::vector<char> scratch;
  for (size_t k = 0; k < l.pieces(); ++k) {
    std::string piece = bytes_[0].substr(l.begin(k), l.length(k));
    piece[piece.size() / 2] ^= 0x01;
    Status s = VerifyPiece(*img_, l, k, piece.data(), &scratch);
    EXPECT_EQ(s.code(), Code::kCorrupt) << "piece " << k << ": " << s.ToString();
  }
  std::string head = bytes_[0].substr(0, l.length(0));
  head[20] ^= 0x01;  // the reserved word: only the header checksum notices
  EXPECT_EQ(VerifyPiece(*img_, l, 0, head.data(), &scratch).code(), Code::kCorrupt);
  // Partition 1's first piece is not partition 0's.
  const PartLayout& l1 = (*layouts)[1];
  std::string other = bytes_[0].substr(0, l1.length(0));
  other.resize(l1.length(0));
  EXPECT_EQ(VerifyPiece(*img_, l1, 0, other.data(), &scratch).code(), Code::kCorrupt);
}

TEST(PieceReaderTest, EachPieceHasOneReaderAmongItsHoldersAndTheReadsAreSpread) {
  const int n = 4;
  const uint32_t rep = 8;
  std::map<int, int> reads;
  for (uint64_t k = 0; k < 400; ++k) {
    int r = PieceReader(rep, k, rep, n, 1);
    ++reads[r];
    for (uint32_t p = 0; p < 8; ++p) {
      int q = PieceReader(p, k, rep, n, 2);
      EXPECT_TRUE(Holds(q, p, rep, n, 2)) << "partition " << p << " piece " << k << " read by rank " << q;
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(reads[r], 100) << "rank " << r;
  // Two holders: each reads every other piece.
  int first = 0;
  for (uint64_t k = 0; k < 100; ++k) first += PieceReader(5, k, rep, n, 2) == 1;
  EXPECT_EQ(first, 50);
  // Partitions of one piece each: every rank reads two of the eight.
  std::map<int, int> one;
  for (uint32_t p = 0; p < 8; ++p) ++one[PieceReader(p, 0, rep, n, 2)];
  for (int r = 0; r < n; ++r) EXPECT_EQ(one[r], 2) << "rank " << r;
}

TEST_F(StagingTest, AStagedReaderServesPiecesAsTheyArriveAndNothingElse) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok());
  const PartLayout& l = (*layouts)[0];
  std::string staging = dir_ + "/staging";
  {
    std::ofstream f(staging, std::ios::binary);
    f << std::string(l.size, 'x');  // not the partition's bytes: what is not marked must not be read from here
  }
  StagedReader reader(img_->PartitionCount());
  reader.Begin(0, open(staging.c_str(), O_RDONLY | O_CLOEXEC), staging, l.size, l.piece_ends);
  EXPECT_TRUE(reader.Has(0));
  EXPECT_FALSE(reader.Has(1));
  // Nothing of a partition not held here, or of one out of range, is staged here.
  EXPECT_FALSE(reader.Staged(1, 0, 1));
  EXPECT_FALSE(reader.Staged(img_->PartitionCount(), 0, 1));
  std::string got(l.length(1), '\0');
  EXPECT_FALSE(reader.Staged(0, l.begin(1), l.length(1)));
  EXPECT_EQ(reader.Read(0, l.begin(1), l.length(1), got.data(), true).code(), StagedReader::kNotStagedYet);
  // Not staged: the caller reads the image directory (ImageDirReads, off the progress thread), never this file.
  EXPECT_EQ(reader.Read(0, l.begin(1), l.length(1), got.data()).code(), Code::kIoError);
  // Marked: read from the staging file (which holds 'x' here, so this shows where the bytes came from).
  reader.MarkPiece(0, 1);
  EXPECT_TRUE(reader.Staged(0, l.begin(1), l.length(1)));
  EXPECT_FALSE(reader.Staged(0, l.begin(1), l.length(1) + 1));  // runs into piece 2
  ASSERT_TRUE(reader.Read(0, l.begin(1), l.length(1), got.data(), true).ok());
  EXPECT_EQ(got, std::string(l.length(1), 'x'));
  // Outside the file: an error whatever is staged.
  EXPECT_EQ(reader.Read(0, l.size - 1, 2, got.data()).code(), Code::kInvalidArgument);
  reader.StagingFailed();
  EXPECT_EQ(reader.Read(0, 0, 10, got.data(), true).code(), Code::kIoError);
}

// A partition deleted from the image directory before the daemon first opened it: the read that needed it is an
// I/O error naming the partition (it was kNotFound, which clients turned into ENOENT for a file stat shows).
TEST_F(StagingTest, APartitionGoneFromTheImageDirectoryIsAnIoErrorNamingIt) {
  const std::string gone = dir_ + "/gone\npart.fsp";
  ImageDirReader image_dir({gone}, 0);
  std::string buf(16, '\0');
  Status s = image_dir.ReadNow(0, 0, buf.size(), buf.data());
  EXPECT_EQ(s.code(), Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("gone\\npart.fsp is missing from the image directory"), std::string::npos) << s.message();
  EXPECT_EQ(ToErrno(s), EIO);
}

// The half-written files of a run that died (SIGKILL, a failed start) hold their full size: the next daemon to lock
// the directory removes them, and nothing else (a user's files that only look alike stay).
TEST_F(StagingTest, LockingTheStagingDirectoryRemovesTheTempFilesOfDeadRuns) {
  const std::string local = tmp_ / "local";
  ASSERT_EQ(mkdir(local.c_str(), 0755), 0);
  const std::vector<std::string> stale = {"part-00003.fsp.tmp.4242", "part-rep.fsp.tmp.17", "index.fsi.tmp.99",
                                          ".fanstore-staged.tmp.5"};
  const std::vector<std::string> kept = {"part-00003.fsp",      "part-00003.fsp.tmp.",   "part-00003.fsp.tmp.12a",
                                         "part-0003.fsp.tmp.7", "notes.txt.tmp.42",      "part-x0003.fsp.tmp.7",
                                         "index.fsi.tmp.4.1",   "part-00003.fsp.tmp.42~"};
  for (const auto& n : stale) test::WriteFile(local + "/" + n, std::string(5000, 'x'));
  for (const auto& n : kept) test::WriteFile(local + "/" + n, "mine");
  ASSERT_EQ(symlink("/nonexistent", (local + "/part-00004.fsp.tmp.8").c_str()), 0);  // not a regular file: left
  StagedFiles staged;
  auto fd = LockLocal(tmp_ / "img", local, &staged);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  for (const auto& n : stale) EXPECT_NE(access((local + "/" + n).c_str(), F_OK), 0) << n;
  for (const auto& n : kept) EXPECT_EQ(test::ReadAll(local + "/" + n), "mine") << n;
  struct stat st;
  EXPECT_EQ(lstat((local + "/part-00004.fsp.tmp.8").c_str(), &st), 0);
  close(*fd);
}

TEST_F(StagingTest, AReaderWaitsForThePieceStagingReadsNextUntilItIsInOrTheWaitIsUp) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok());
  const PartLayout& l = (*layouts)[0];
  std::string staging = dir_ + "/staging";
  std::ofstream(staging, std::ios::binary) << bytes_[0];
  StagedReader reader(img_->PartitionCount());
  reader.Begin(0, open(staging.c_str(), O_RDONLY | O_CLOEXEC), staging, l.size, l.piece_ends);
  int called = 0;
  auto done = [&] { ++called; };
  EXPECT_FALSE(reader.Await(0, l.begin(1), 10, done)) << "no waits set up";
  std::vector<size_t> hurried;
  reader.SetWaits(
      60000000, [](uint32_t, size_t piece) { return piece != 2; },
      [&](uint32_t, size_t piece) { hurried.push_back(piece); });
  EXPECT_FALSE(reader.Await(0, l.begin(2), 10, done)) << "piece 2 is read elsewhere";
  EXPECT_FALSE(reader.Await(0, l.begin(1), l.length(1) + 1, done)) << "spans two pieces";
  ASSERT_TRUE(reader.Await(0, l.begin(1), 10, done));
  EXPECT_EQ(hurried, std::vector<size_t>{1});
  EXPECT_FALSE(reader.PollWaits(daemon_proto::NowUs()));
  reader.MarkPiece(0, 1);
  EXPECT_FALSE(reader.Await(0, l.begin(1), 10, done)) << "staged: nothing to wait for";
  EXPECT_TRUE(reader.PollWaits(daemon_proto::NowUs()));
  EXPECT_EQ(called, 1);
  // The wait is up: called all the same (the caller then reads as usual).
  ASSERT_TRUE(reader.Await(0, l.begin(3), 10, done));
  EXPECT_TRUE(reader.PollWaits(daemon_proto::NowUs() + 60000001));
  EXPECT_EQ(called, 2);
}

TEST_F(StagingTest, StagingReadsArePacedAtTheCap) {
  ImageDirReader image_dir({img_->PartitionPath(0)}, 1 << 20);  // 1 MiB/s
  std::string buf(256 << 10, '\0');
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(image_dir.ReadForStaging(0, 0, buf.size(), buf.data(), nullptr).ok());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 768 KiB at 1 MiB/s, less the tenth of a second a budget may have saved up (the first read waits its share too).
  EXPECT_GE(s, 0.75 - 0.1 - 0.02);
  EXPECT_EQ(image_dir.staging_bytes(), 3u * buf.size());
  // The next read's turn is a quarter of a second away: a cancellation ends the wait without reading.
  std::string big(buf.size(), '\0');
  bool interrupted = false;
  EXPECT_FALSE(image_dir
                   .ReadForStaging(
                       0, 0, big.size(), big.data(), [] { return true; }, false, &interrupted)
                   .ok());
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(image_dir.staging_bytes(), 3u * buf.size());
  // A piece a reader waits for goes at once, whatever the cap (no wait: nothing asks whether to stop waiting), and
  // counts as staging's.
  bool waited = false;
  ASSERT_TRUE(image_dir
                  .ReadForStaging(
                      0, 0, big.size(), big.data(), [&] { return waited = true, false; }, true)
                  .ok());
  EXPECT_FALSE(waited);
  EXPECT_EQ(image_dir.staging_bytes(), 4u * buf.size());
}

// A FIFO in the image directory stands for a hung shared file system: opening it for reading blocks until a writer
// comes (and reading it then fails: ESPIPE), as a read of a stopped sshfs or NFS server blocks.
std::string HungFile(const std::string& path) {
  EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
  return path;
}

// Ends the hang of a reader blocked in opening `fifo` (its read then fails); false while no reader is there yet.
bool UnhangOnce(const std::string& fifo) {
  int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO while no reader has come yet
  if (fd < 0) return false;
  close(fd);
  return true;
}
void Unhang(const std::string& fifo) { (void)UnhangOnce(fifo); }

TEST_F(StagingTest, ImageDirReadsAnswerOnTheCallersThreadAndTimeOutWhenTheFileSystemHangs) {
  const std::string fifo = HungFile(dir_ + "/hung.fsp");
  auto dir = std::make_shared<ImageDirReader>(std::vector<std::string>{img_->PartitionPath(0), fifo}, 0);
  std::atomic<int> wakes{0};
  ImageDirReads reads(dir, [&] { ++wakes; });
  struct Got {
    int calls = 0;
    Status s;
    std::string bytes;
  };
  Got ok, hung;
  auto into = [](Got* g) {
    return [g](const Status& s, const char* data, uint64_t n) {
      ++g->calls;
      g->s = s;
      if (s.ok()) g->bytes.assign(data, n);
    };
  };
  const int64_t far = daemon_proto::NowUs() + 3600000000;  // an hour: only Poll's `now` below reaches it
  reads.Read(1, 0, 100, far, into(&hung));                 // blocks its thread in open()
  reads.Read(0, 1000, 5000, far, into(&ok));               // another thread reads it meanwhile
  while (ok.calls == 0) {
    reads.Poll(daemon_proto::NowUs());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(ok.s.ok()) << ok.s.ToString();
  EXPECT_EQ(ok.bytes, bytes_[0].substr(1000, 5000));
  EXPECT_EQ(dir->reader_bytes(), 5000u);
  EXPECT_GE(wakes.load(), 1);
  EXPECT_EQ(hung.calls, 0);
  EXPECT_EQ(reads.pending(), 1u);
  // Its deadline passes: a timeout that says where, on the caller's thread; the thread stays stuck meanwhile.
  EXPECT_TRUE(reads.Poll(far));
  EXPECT_EQ(hung.calls, 1);
  EXPECT_EQ(hung.s.code(), Code::kTimeout);
  EXPECT_NE(hung.s.message().find("partition 1"), std::string::npos) << hung.s.message();
  // The file system comes back: the thread's late result is dropped, never handed to anyone.
  while (!UnhangOnce(fifo)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 20; ++i) {
    EXPECT_FALSE(reads.Poll(daemon_proto::NowUs()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(hung.calls, 1);
  EXPECT_EQ(reads.pending(), 0u);
}

// A fake peer side: every fetch fails at once (no rank can send: the image directory must).
class NoPeers final : public PeerFetcher {
 public:
  void Fetch(const ByteRange&, FetchSink* sink) override {
    sink->Done(Status(Code::kIoError, "no rank holds it here"), nullptr, 0);
  }
};

// One client connection (a socketpair the server adopted): a request, then its reply.
struct TestConn {
  int fd = -1;
  char* area = nullptr;
  size_t area_size = 0;
  uint64_t next_id = 1;
  ~TestConn() {
    if (area) munmap(area, area_size);
    if (fd >= 0) close(fd);
  }
  void Send(daemon_proto::MsgType type, uint32_t part = 0, uint64_t offset = 0, uint64_t length = 0,
            uint32_t flags = 0) {
    daemon_proto::Request r;
    r.type = type;
    r.flags = flags;
    r.req_id = next_id++;
    r.part = part;
    r.offset = offset;
    r.length = length;
    unsigned char b[daemon_proto::kRequestSize];
    daemon_proto::EncodeRequest(r, b);
    ASSERT_TRUE(daemon_proto::SendAll(fd, b, sizeof b, daemon_proto::NowMs() + 10000).ok());
  }
  // The reply's status and payload; kTimeout after `wait_ms` (hang detection only: a healthy daemon answers in
  // microseconds).
  Status Reply(std::string* payload, int wait_ms = 20000) {
    unsigned char b[daemon_proto::kReplyHeaderSize];
    int got_fd = -1;
    Status s = daemon_proto::RecvAll(fd, b, sizeof b, daemon_proto::NowMs() + wait_ms, &got_fd);
    if (!s.ok()) return s;
    daemon_proto::ReplyHeader h;
    if (!daemon_proto::DecodeReplyHeader(b, &h)) return Status(Code::kIoError, "bad reply header");
    std::string msg(h.msg_len, '\0');
    if (h.msg_len) {
      s = daemon_proto::RecvAll(fd, msg.data(), msg.size(), daemon_proto::NowMs() + wait_ms, nullptr);
      if (!s.ok()) return s;
    }
    if (h.flags & daemon_proto::kNewArea) {
      struct stat st;
      fstat(got_fd, &st);
      if (area) munmap(area, area_size);
      area_size = static_cast<size_t>(st.st_size);
      area = static_cast<char*>(mmap(nullptr, area_size, PROT_READ, MAP_SHARED, got_fd, 0));
    }
    if (got_fd >= 0) close(got_fd);
    if (h.code != Code::kOk) return Status(h.code, msg);
    payload->resize(h.payload_size);
    if (h.flags & daemon_proto::kPayloadInArea) {
      payload->assign(area + h.shm_offset, h.payload_size);
    } else if (h.payload_size) {
      s = daemon_proto::RecvAll(fd, payload->data(), payload->size(), daemon_proto::NowMs() + wait_ms, nullptr);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
};

// A daemon's socket server and router over `img`: `peers` stands for the other nodes, `dir` for the image
// directory; no deadline within a test. Clients connect through socketpairs.
struct RouterRig {
  RouterRig(const std::shared_ptr<const Image>& img, StagedReader* staged, PeerFetcher* peers,
            std::shared_ptr<ImageDirReader> dir)
      : server(Options(*img, cache), &stats),
        reads(std::move(dir), [this] { server.Wake(); }),
        router(img, staged, peers, &cache, &server, &stats, Route(), &reads) {
    server.SetHandler(&router);
  }
  static ServerOptions Options(const Image& img, const FetchCache& cache) {
    ServerOptions so;
    so.partitions = img.PartitionCount();
    so.cache_fd = cache.shared_fd();
    return so;
  }
  static RouterOptions Route() {
    RouterOptions ro;
    ro.timeout_us = 3600000000;
    return ro;
  }
  void Connect(TestConn* t) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    t->fd = sv[0];
    ASSERT_TRUE(server.Adopt(sv[1]).ok());
  }
  DaemonStats stats;
  FetchCache cache{8u << 20};
  SocketServer server;
  ImageDirReads reads;
  FetchRouter router;
};

// The defect: the progress thread read the image directory itself, so a slow or hung shared file system froze the
// daemon -- hellos, reads of what is staged here, peers -- for as long as one read took. Here two reads hang (a
// partition being staged here, and one no rank can send), and the daemon still answers a hello and a read of a
// staged partition; the hung reads get an error, never bytes, once the file system answers.
TEST_F(StagingTest, AHungImageDirectoryHoldsUpOnlyTheReadsThatNeedIt) {
  const std::string src = tmp_ / "src";
  auto packed = test::PackTree(src, tmp_ / "img3", 3, {}, 1, nullptr, 64 << 10);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  auto img = test::OpenOrDie(tmp_ / "img3");
  const std::string fifo1 = HungFile(dir_ + "/hung1.fsp"), fifo2 = HungFile(dir_ + "/hung2.fsp");
  std::vector<std::string> part(3);
  for (uint32_t p = 0; p < 3; ++p) part[p] = test::ReadAll(img->PartitionPath(p));
  // Partition 0 is staged here; 1 is held here and being staged, nothing in yet; 2 is another node's.
  StagedReader staged(3);
  staged.Begin(0, open(img->PartitionPath(0).c_str(), O_RDONLY | O_CLOEXEC), "part 0", part[0].size(), {});
  auto layouts = CutPartitions(*img, {1}, {part[1].size()}, 64 << 10);
  ASSERT_TRUE(layouts.ok());
  const std::string tmp1 = dir_ + "/part1.tmp";
  test::WriteFile(tmp1, std::string(part[1].size(), 'x'));
  staged.Begin(1, open(tmp1.c_str(), O_RDONLY | O_CLOEXEC), tmp1, part[1].size(), (*layouts)[0].piece_ends);
  auto dir = std::make_shared<ImageDirReader>(std::vector<std::string>{img->PartitionPath(0), fifo1, fifo2}, 0);
  NoPeers peers;
  RouterRig rig(img, &staged, &peers, dir);  // the hung reads end when the file system answers
  SocketServer& server = rig.server;
  ImageDirReads& reads = rig.reads;
  TestConn a, b, c;
  for (TestConn* t : {&a, &b, &c}) ASSERT_NO_FATAL_FAILURE(rig.Connect(t));
  // The daemon's progress thread.
  std::atomic<bool> stop{false}, exited{false};
  std::thread progress([&] {
    while (!stop) {
      server.Poll(1000);
      reads.Poll(daemon_proto::NowUs());
    }
    exited = true;
  });
  struct Joiner {  // however the test ends: the file system answers, and the thread is joined
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{[&] {
    stop = true;
    while (!exited) {
      Unhang(fifo1);
      Unhang(fifo2);
      server.Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    progress.join();
  }};
  a.Send(daemon_proto::MsgType::kFetch, 1, 0, 100);     // not staged here yet: the image directory, which hangs
  c.Send(daemon_proto::MsgType::kFetch, 2, 100, 1000);  // no rank can send it: the image directory, which hangs
  // Meanwhile (the file system hangs until Unhang below opens the FIFOs' other ends) the daemon answers a hello and
  // a read of a partition staged here. Before, the progress thread was stuck in the first read: no reply came.
  b.Send(daemon_proto::MsgType::kHello);
  std::string got;
  Status s = b.Reply(&got);
  ASSERT_TRUE(s.ok()) << "hello: " << s.ToString();
  b.Send(daemon_proto::MsgType::kFetch, 0, 500, 3000);
  s = b.Reply(&got);
  ASSERT_TRUE(s.ok()) << "staged read: " << s.ToString();
  EXPECT_EQ(got, part[0].substr(500, 3000));
  EXPECT_EQ(reads.pending(), 2u);  // (read on the progress thread after its Poll: both still hang)
  // The file system answers (and the FIFOs cannot be read): an error for each, never bytes.
  while (!UnhangOnce(fifo1)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  while (!UnhangOnce(fifo2)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s = a.Reply(&got);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hung1.fsp"), std::string::npos) << s.ToString();
  s = c.Reply(&got);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no rank holds it here; then from the image directory"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("hung2.fsp"), std::string::npos) << s.ToString();
}

// A fake peer side that answers when the test says: each fetch waits until Answer (on the progress thread).
class HeldPeers final : public PeerFetcher {
 public:
  void Fetch(const ByteRange&, FetchSink* sink) override {
    held_.push_back(sink);
    ++calls;
  }
  void Answer(const std::string& bytes) {
    FetchSink* sink = held_.front();
    held_.erase(held_.begin());
    char* at = sink->Land(bytes.size());
    std::memcpy(at, bytes.data(), bytes.size());
    sink->Done(Status::Ok(), at, bytes.size());
  }
  std::atomic<int> calls{0};

 private:
  std::vector<FetchSink*> held_;
};

// The defect: a client that found a peer's bytes damaged had the range dropped from the fetch cache, but a fetch
// of the same range already in flight (from the same damaged copy) put its bytes back, and the next reader got them
// from the cache. Such a fetch's bytes now go to its waiters only.
TEST_F(StagingTest, BytesFoundDamagedAreNotCachedByAFetchAlreadyInFlight) {
  StagedReader staged(img_->PartitionCount());  // nothing held here: every range is another node's
  std::vector<std::string> paths;
  for (uint32_t p = 0; p < img_->PartitionCount(); ++p) paths.push_back(img_->PartitionPath(p));
  auto dir = std::make_shared<ImageDirReader>(paths, 0);
  HeldPeers peers;
  RouterRig rig(img_, &staged, &peers, dir);
  SocketServer& server = rig.server;
  ImageDirReads& reads = rig.reads;
  TestConn a, b, c;
  for (TestConn* t : {&a, &b, &c}) ASSERT_NO_FATAL_FAILURE(rig.Connect(t));
  std::mutex mu;
  std::vector<std::function<void()>> posted;  // run on the progress thread, as the router requires
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    while (!stop) {
      server.Poll(10);
      reads.Poll(daemon_proto::NowUs());
      std::vector<std::function<void()>> todo;
      {
        std::lock_guard<std::mutex> l(mu);
        todo.swap(posted);
      }
      for (auto& f : todo) f();
    }
  });
  struct Joiner {
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{[&] {
    stop = true;
    server.Wake();
    progress.join();
  }};
  auto post = [&](std::function<void()> f) {
    std::lock_guard<std::mutex> l(mu);
    posted.push_back(std::move(f));
    server.Wake();
  };
  auto wait_calls = [&](int n) {
    for (int i = 0; i < 20000 && peers.calls < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return peers.calls.load();
  };
  const std::string right = bytes_[1].substr(100, 1000);
  std::string bad = right;
  bad[10] ^= 0x40;
  a.Send(daemon_proto::MsgType::kFetch, 1, 100, 1000);  // in flight from the (damaged) peer
  ASSERT_EQ(wait_calls(1), 1);
  b.Send(daemon_proto::MsgType::kFetch, 1, 100, 1000, daemon_proto::kFromSource);  // b found them damaged
  std::string got;
  Status s = b.Reply(&got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, right);  // from the image directory
  post([&] { peers.Answer(bad); });
  s = a.Reply(&got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, bad);  // (the client's checksum rejects them and asks as b did)
  // The next reader is not served those bytes from the cache: the range is fetched again.
  c.Send(daemon_proto::MsgType::kFetch, 1, 100, 1000);
  ASSERT_EQ(wait_calls(2), 2) << "served from the fetch cache";
  post([&] { peers.Answer(right); });
  s = c.Reply(&got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, right);
}

}  // namespace
}  // namespace fanstore::daemon
