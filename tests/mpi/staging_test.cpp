// Staging's pieces (stage_layout), who reads each one (placement), the reader that serves a partition while it is
// staged (StagedReader) and the paced reads of the image directory (ImageDirReader). MPI-free.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "daemon_protocol.hpp"
#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"
#include "image_dir_reader.hpp"
#include "placement.hpp"
#include "stage_layout.hpp"
#include "staged_reader.hpp"
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

TEST_F(StagingTest, AStagedReaderServesPiecesAsTheyArriveAndTheImageDirectoryMeanwhile) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok());
  const PartLayout& l = (*layouts)[0];
  std::string staging = dir_ + "/staging";
  {
    std::ofstream f(staging, std::ios::binary);
    f << std::string(l.size, 'x');  // not the partition's bytes: what is not marked must not be read from here
  }
  ImageDirReader image_dir({img_->PartitionPath(0), img_->PartitionPath(1)}, 0);
  StagedReader reader(img_->PartitionCount(), &image_dir);
  reader.Begin(0, open(staging.c_str(), O_RDONLY | O_CLOEXEC), staging, l.size, l.piece_ends);
  EXPECT_TRUE(reader.Has(0));
  EXPECT_FALSE(reader.Has(1));
  // Nothing of a partition not held here, or of one out of range, is staged here.
  EXPECT_FALSE(reader.Staged(1, 0, 1));
  EXPECT_FALSE(reader.Staged(img_->PartitionCount(), 0, 1));
  std::string got(l.length(1), '\0');
  EXPECT_FALSE(reader.Staged(0, l.begin(1), l.length(1)));
  EXPECT_EQ(reader.Read(0, l.begin(1), l.length(1), got.data(), true).code(), StagedReader::kNotStagedYet);
  ASSERT_TRUE(reader.Read(0, l.begin(1), l.length(1), got.data()).ok());
  EXPECT_EQ(got, bytes_[0].substr(l.begin(1), l.length(1)));
  EXPECT_EQ(image_dir.reader_bytes(), l.length(1));
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

TEST_F(StagingTest, AReaderWaitsForThePieceStagingReadsNextUntilItIsInOrTheWaitIsUp) {
  auto layouts = CutPartitions(*img_, parts_, sizes_, 100 << 10);
  ASSERT_TRUE(layouts.ok());
  const PartLayout& l = (*layouts)[0];
  std::string staging = dir_ + "/staging";
  std::ofstream(staging, std::ios::binary) << bytes_[0];
  StagedReader reader(img_->PartitionCount(), nullptr);
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
  // 768 KiB at 1 MiB/s, less the tenth of a second a budget may have saved up and the last read's own share.
  EXPECT_GE(s, 0.75 - 0.1 - 0.25 - 0.02);
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

}  // namespace
}  // namespace fanstore::daemon
