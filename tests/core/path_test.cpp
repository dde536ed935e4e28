// ClassifyPath / NormalizeAbsolute / JoinRel: the pure "is this path ours?" functions, no image needed.
#include "fanstore/path.hpp"

#include <gtest/gtest.h>
#include <limits.h>

namespace fanstore {
namespace {

TEST(NormalizeAbsoluteTest, Basics) {
  EXPECT_EQ(NormalizeAbsolute("/"), "/");
  EXPECT_EQ(NormalizeAbsolute("//"), "/");
  EXPECT_EQ(NormalizeAbsolute("/a//b///c"), "/a/b/c");
  EXPECT_EQ(NormalizeAbsolute("/a/./b/."), "/a/b");
  EXPECT_EQ(NormalizeAbsolute("/a/b/"), "/a/b");
  EXPECT_EQ(NormalizeAbsolute("/a/b/../c"), "/a/c");
  EXPECT_EQ(NormalizeAbsolute("/.."), "/");
  EXPECT_EQ(NormalizeAbsolute("/../../a"), "/a");
  EXPECT_EQ(NormalizeAbsolute("/a/..."), "/a/...");  // "..." is a name
  EXPECT_EQ(NormalizeAbsolute("/a/..b/.c"), "/a/..b/.c");
}

struct Case {
  const char* path;
  const char* cwd;
  PathClass cls;
  const char* rel;
};

class ClassifyTest : public ::testing::TestWithParam<Case> {};

TEST_P(ClassifyTest, Classifies) {
  const Case& c = GetParam();
  Classified r = ClassifyPath(c.path, "/fanstore", c.cwd);
  EXPECT_EQ(r.cls, c.cls) << c.path << " (cwd " << c.cwd << ")";
  if (c.cls == PathClass::kOurs) {
    EXPECT_EQ(r.rel, c.rel) << c.path;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, ClassifyTest,
    ::testing::Values(
        Case{"/fanstore", "/", PathClass::kOurs, ""},   // the mount root itself
        Case{"/fanstore/", "/", PathClass::kOurs, ""},  // trailing '/'
        Case{"/fanstore/train/a.jpg", "/", PathClass::kOurs, "train/a.jpg"},
        Case{"/fanstore//train///a.jpg", "/", PathClass::kOurs, "train/a.jpg"},   // '//'
        Case{"/fanstore/./train/./a.jpg", "/", PathClass::kOurs, "train/a.jpg"},  // '.'
        Case{"/fanstore/train/../val/b", "/", PathClass::kOurs, "val/b"},         // '..' inside
        Case{"/fanstore/train/", "/", PathClass::kOurs, "train"},
        Case{"/fanstore/..", "/", PathClass::kNotOurs, ""},  // '..' escapes the mount
        Case{"/fanstore/../etc/passwd", "/", PathClass::kNotOurs, ""},
        Case{"/fanstore/a/../../fanstore/b", "/", PathClass::kOurs, "b"},  // out and back in
        Case{"/fanstorex", "/", PathClass::kNotOurs, ""},                  // a prefix is not ours
        Case{"/fanstorex/a", "/", PathClass::kNotOurs, ""}, Case{"/fanstore.old/a", "/", PathClass::kNotOurs, ""},
        Case{"/fanstorex/../fanstore/a", "/", PathClass::kOurs, "a"},  // a sibling, then back in
        Case{"/usr/lib/libc.so", "/", PathClass::kNotOurs, ""},
        Case{"/usr/../fanstore/a", "/", PathClass::kOurs, "a"},  // '..' into the mount
        Case{"//fanstore/a", "/", PathClass::kOurs, "a"}, Case{"/./fanstore/a", "/", PathClass::kOurs, "a"},
        Case{"a.jpg", "/fanstore/train", PathClass::kOurs, "train/a.jpg"},  // relative to cwd
        Case{"./a.jpg", "/fanstore/train", PathClass::kOurs, "train/a.jpg"},
        Case{"../val/b", "/fanstore/train", PathClass::kOurs, "val/b"},
        Case{"..", "/fanstore/train", PathClass::kOurs, ""},
        Case{"../..", "/fanstore/train", PathClass::kNotOurs, ""},  // climbs out
        Case{".", "/fanstore", PathClass::kOurs, ""}, Case{"fanstore/a", "/", PathClass::kOurs, "a"},
        Case{"a", "/home/me", PathClass::kNotOurs, ""}, Case{"../fanstore/x", "/home", PathClass::kOurs, "x"},
        Case{"", "/fanstore", PathClass::kNotOurs, ""}));  // empty: libc says ENOENT

TEST(ClassifyPathTest, PathMax) {
  std::string under = "/fanstore/" + std::string(PATH_MAX - 20, 'a');
  EXPECT_EQ(ClassifyPath(under, "/fanstore", "/").cls, PathClass::kOurs);
  std::string over = "/fanstore/" + std::string(PATH_MAX, 'a');
  EXPECT_EQ(ClassifyPath(over, "/fanstore", "/").cls, PathClass::kTooLong);
  std::string foreign = "/usr/" + std::string(PATH_MAX, 'a');
  EXPECT_EQ(ClassifyPath(foreign, "/fanstore", "/").cls, PathClass::kNotOurs);
  std::string rel(PATH_MAX, 'b');
  EXPECT_EQ(ClassifyPath(rel, "/fanstore", "/fanstore").cls, PathClass::kTooLong);
}

TEST(ClassifyPathTest, OtherMounts) {
  Classified r = ClassifyPath("/scratch/data/x", "/scratch/data", "/");
  EXPECT_EQ(r.cls, PathClass::kOurs);
  EXPECT_EQ(r.rel, "x");
  EXPECT_EQ(ClassifyPath("/scratch/database", "/scratch/data", "/").cls, PathClass::kNotOurs);
}

// BUG in path.cpp (reported, not fixed here): with mount "/" the fast prefix check returns kNotOurs for
// every path but "/" itself, because it tests path[mount.size()] != '/' (path[1] is a name character).
// The later `mount.size() == 1` branch is never reached. Enable once path.cpp handles mount "/".
TEST(ClassifyPathTest, MountAtRoot) {
  Classified r = ClassifyPath("/any/thing", "/", "/");
  EXPECT_EQ(r.cls, PathClass::kOurs);
  EXPECT_EQ(r.rel, "any/thing");
  r = ClassifyPath("/", "/", "/");
  EXPECT_EQ(r.cls, PathClass::kOurs);
  EXPECT_EQ(r.rel, "");
}

TEST(JoinRelTest, Joins) {
  EXPECT_EQ(JoinRel("", "c"), "c");
  EXPECT_EQ(JoinRel("a/b", "c"), "a/b/c");
}

}  // namespace
}  // namespace fanstore
