// Unit tests of the lexical walk that recognises ancestors of the mount (no preload, no image).
#include "mount_walk.hpp"

#include <gtest/gtest.h>

namespace fanstore::interpose {
namespace {

TEST(MountWalk, AncestorsOfANestedMount) {
  const char* m = "/data/imagenet";
  EXPECT_EQ(WalkPath(m, "", "/").depth, 0);
  EXPECT_EQ(WalkPath(m, "", "/data").depth, 1);
  EXPECT_EQ(WalkPath(m, "", "//data/./").depth, 1);
  EXPECT_EQ(WalkPath(m, "", "/data/imagenet").depth, -1);  // the mount itself is no ancestor
  EXPECT_EQ(WalkPath(m, "", "/data/imagenet/..").depth, 1);
  EXPECT_EQ(WalkPath(m, "", "/dat").depth, -1);
  EXPECT_EQ(WalkPath(m, "", "/datax").depth, -1);
  EXPECT_EQ(WalkPath(m, "", "/etc").depth, -1);
  EXPECT_EQ(WalkPath(m, "", "/etc/..").depth, 0);
  EXPECT_EQ(WalkPath(m, "", "/..").depth, 0);  // never above "/"
}

TEST(MountWalk, RelativeToABase) {
  const char* m = "/data/imagenet";
  EXPECT_EQ(WalkPath(m, "/", "data").depth, 1);
  EXPECT_EQ(WalkPath(m, "/data", ".").depth, 1);
  EXPECT_EQ(WalkPath(m, "/data", "..").depth, 0);
  EXPECT_EQ(WalkPath(m, "/tmp/x", "../../data").depth, 1);
  EXPECT_EQ(WalkPath(m, "/tmp", "data").depth, -1);
  EXPECT_EQ(WalkPath(m, "/data", "/").depth, 0);  // an absolute path ignores the base
}

TEST(MountWalk, EntersTheMount) {
  const char* m = "/fanstore";
  EXPECT_TRUE(WalkPath(m, "/", "fanstore/../etc").enters);
  EXPECT_TRUE(WalkPath(m, "", "/fanstore/x").enters);
  EXPECT_FALSE(WalkPath(m, "/", "etc/passwd").enters);
  EXPECT_FALSE(WalkPath(m, "", "/fanstorex/..").enters);
  EXPECT_EQ(WalkPath(m, "/", "fanstore/..").depth, 0);
}

TEST(MountWalk, RootMountHasNoAncestors) {
  EXPECT_EQ(WalkPath("/", "", "/").depth, -1);
  EXPECT_EQ(WalkPath("/", "", "/x").depth, -1);
}

}  // namespace
}  // namespace fanstore::interpose
