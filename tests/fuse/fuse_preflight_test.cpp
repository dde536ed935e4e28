// Unit tests of the pre-mount checks; they need no FUSE, so they run everywhere.
#include "fuse_preflight.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace fs = std::filesystem;

namespace fanstore::mount {
namespace {

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fanstore-preflight-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(Preflight, EmptyDirectoryIsFine) { EXPECT_TRUE(CheckMountPoint(dir_.string(), false).ok()); }

TEST_F(Preflight, MissingIsNotFound) {
  const Status s = CheckMountPoint((dir_ / "nope").string(), false);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find("does not exist"), std::string::npos);
}

TEST_F(Preflight, FileIsNotADirectory) {
  std::ofstream(dir_ / "f") << "x";
  EXPECT_EQ(CheckMountPoint((dir_ / "f").string(), false).code(), Code::kNotDirectory);
  EXPECT_EQ(CheckMountPoint((dir_ / "f" / "x").string(), false).code(), Code::kNotDirectory);
}

TEST_F(Preflight, NonEmptyNeedsTheOption) {
  std::ofstream(dir_ / "f") << "x";
  const Status s = CheckMountPoint(dir_.string(), false);
  EXPECT_EQ(s.code(), Code::kExists);
  EXPECT_NE(s.message().find("nonempty"), std::string::npos);
  EXPECT_TRUE(CheckMountPoint(dir_.string(), true).ok());
}

TEST_F(Preflight, RootAndProcAreMountPoints) {
  EXPECT_TRUE(IsMountPoint("/"));
  EXPECT_TRUE(IsMountPoint("/proc"));
  EXPECT_FALSE(IsMountPoint(dir_.string()));
  EXPECT_EQ(CheckMountPoint("/proc", true).code(), Code::kExists);
}

TEST_F(Preflight, MissingDeviceIsOneActionableLine) {
  const Status s = CheckFuseDevice((dir_ / "fuse").string());
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("modprobe fuse"), std::string::npos);
}

}  // namespace
}  // namespace fanstore::mount
