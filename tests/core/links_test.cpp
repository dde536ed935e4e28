// Environments in an image: pack keeps symlinks, hard links and owners; Client::Resolve follows links as the
// kernel does (through directories, out of the image, loops, PATH_MAX).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "fanstore/client.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;

Result<PackReport> PackWith(const std::string& src, const std::string& out, bool follow, bool strict,
                            std::vector<std::string>* warnings) {
  PackOptions o;
  o.source = src;
  o.output = out;
  o.threads = 2;
  o.follow_symlinks = follow;
  o.strict = strict;
  return Pack(o, {}, [warnings](const std::string& w) { warnings->push_back(w); });
}

class LinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = tmp_ / "src";
    test::WriteFile(src_ + "/lib/libfoo.so.1.2", "ELF-ish bytes");
    test::WriteFile(src_ + "/bin/python3.11", "#!python");
    ASSERT_EQ(::symlink("libfoo.so.1.2", (src_ + "/lib/libfoo.so").c_str()), 0);
    ASSERT_EQ(::symlink("lib", (src_ + "/lib64").c_str()), 0);
    ASSERT_EQ(::symlink("python3.11", (src_ + "/bin/python").c_str()), 0);
    ASSERT_EQ(::symlink("../lib64/libfoo.so", (src_ + "/bin/via").c_str()), 0);
    ASSERT_EQ(::symlink("/fanstore/lib/libfoo.so.1.2", (src_ + "/abs_in").c_str()), 0);
    ASSERT_EQ(::symlink("/etc", (src_ + "/abs_out").c_str()), 0);
    ASSERT_EQ(::symlink("../..", (src_ + "/bin/above").c_str()), 0);
    ASSERT_EQ(::symlink("nowhere", (src_ + "/dangling").c_str()), 0);
    ASSERT_EQ(::symlink("loop2", (src_ + "/loop1").c_str()), 0);
    ASSERT_EQ(::symlink("loop1", (src_ + "/loop2").c_str()), 0);
    ASSERT_EQ(::symlink(std::string(4090, 'a').insert(0, "x/").c_str(), (src_ + "/long").c_str()), 0);
    ASSERT_EQ(::link((src_ + "/bin/python3.11").c_str(), (src_ + "/bin/hard").c_str()), 0);
    ASSERT_EQ(::mkfifo((src_ + "/fifo").c_str(), 0600), 0);
    ASSERT_EQ(::chmod((src_ + "/lib/libfoo.so.1.2").c_str(), 04751), 0);
  }
  TempDir tmp_;
  std::string src_;
};

TEST_F(LinksTest, PackKeepsLinksHardLinksAndOwners) {
  std::vector<std::string> warnings;
  auto r = PackWith(src_, tmp_ / "img", false, false, &warnings);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->links, 11u);
  EXPECT_EQ(r->skipped, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("skipped 1 special file (1 FIFO), e.g. fifo"), std::string::npos) << warnings[0];
  auto img = test::OpenOrDie(tmp_ / "img");
  EXPECT_EQ(img->Summary().links, 11u);
  EXPECT_TRUE(img->HoldsSharedLibraries());  // lib/libfoo.so.1.2: `fanstore run` loads the audit module
  const Entry so = img->Get(*img->Lookup("lib/libfoo.so"));
  ASSERT_TRUE(so.is_link());
  EXPECT_EQ(so.d_type(), DT_LNK);
  EXPECT_EQ(so.size, 13u);
  EXPECT_EQ(*img->LinkTarget(so), "libfoo.so.1.2");
  EXPECT_EQ(*img->LinkTarget(img->Get(*img->Lookup("dangling"))), "nowhere");
  EXPECT_EQ(img->LinkTarget(img->Get(*img->Lookup("lib/libfoo.so.1.2"))).status().code(), Code::kCorrupt);
  // A link to a directory is a link, and nothing below it is an entry of its own.
  EXPECT_TRUE(img->Get(*img->Lookup("lib64")).is_link());
  EXPECT_EQ(img->Lookup("lib64/libfoo.so").status().code(), Code::kNotDirectory);
  // Hard links: one inode, the link count, the bytes stored once.
  const Entry a = img->Get(*img->Lookup("bin/python3.11")), b = img->Get(*img->Lookup("bin/hard"));
  EXPECT_EQ(a.ino, b.ino);
  EXPECT_EQ(a.nlink, 2u);
  EXPECT_EQ(b.nlink, 2u);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.part, b.part);
  EXPECT_EQ(img->Summary().part_files[0], 2u);  // libfoo and python3.11: the hard link adds no bytes
  EXPECT_EQ(test::ReadImageFile(*img, "bin/hard"), "#!python");
  const Entry lib = img->Get(*img->Lookup("lib/libfoo.so.1.2"));
  EXPECT_EQ(lib.mode & 07777, 04751u);
  EXPECT_EQ(lib.uid, static_cast<uint32_t>(::getuid()));
  EXPECT_EQ(lib.gid, static_cast<uint32_t>(::getgid()));
  EXPECT_EQ(VerifyImage(*img, 2, {}), 0u);
}

TEST(SparseTest, HolesAreStoredAsNothing) {
  TempDir tmp;
  const std::string src = tmp / "src";
  test::WriteFile(src + "/sparse", "");
  ASSERT_EQ(::truncate((src + "/sparse").c_str(), 5 << 20), 0);  // 5 chunks of 1 MiB, one with data in its middle
  {
    FILE* f = std::fopen((src + "/sparse").c_str(), "r+");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 2500000, SEEK_SET);
    std::fputs("middle", f);
    std::fclose(f);
  }
  test::WriteFile(src + "/zeros", std::string(100000, '\0'));                 // one chunk, all zeros
  auto r = test::PackTree(src, tmp / "img", 1, {}, 2, nullptr, 1u << 20, 0);  // --level 0 too
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto img = test::OpenOrDie(tmp / "img");
  const Entry sparse = img->Get(*img->Lookup("sparse")), zeros = img->Get(*img->Lookup("zeros"));
  EXPECT_FALSE(img->HoldsSharedLibraries());
  EXPECT_EQ(zeros.codec, Codec::kZero);
  EXPECT_EQ(zeros.stored_size, 0u);
  EXPECT_EQ(sparse.stored_size, 1u << 20);  // only the chunk with data, raw at level 0
  int zero_chunks = 0;
  for (uint64_t i = 0; i < img->ChunkCount(sparse); ++i) zero_chunks += img->GetChunk(sparse, i)->codec == Codec::kZero;
  EXPECT_EQ(zero_chunks, 4);
  std::string want(5 << 20, '\0');
  want.replace(2500000, 6, "middle");
  EXPECT_EQ(test::ReadImageFile(*img, "sparse"), want);
  EXPECT_EQ(test::ReadImageFile(*img, "zeros"), std::string(100000, '\0'));
  EXPECT_EQ(VerifyImage(*img, 2, {}), 0u);
}

TEST_F(LinksTest, FollowSymlinksKeepsTheOldTree) {
  for (const char* l : {"/long", "/abs_out", "/bin/above"}) ASSERT_EQ(::unlink((src_ + l).c_str()), 0);  // not /etc
  std::vector<std::string> warnings;
  auto r = PackWith(src_, tmp_ / "img", true, false, &warnings);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->links, 0u);
  auto img = test::OpenOrDie(tmp_ / "img");
  EXPECT_TRUE(img->Get(*img->Lookup("lib64")).is_dir());
  EXPECT_EQ(test::ReadImageFile(*img, "lib64/libfoo.so"), "ELF-ish bytes");
  EXPECT_EQ(test::ReadImageFile(*img, "bin/via"), "ELF-ish bytes");
  for (const char* p : {"dangling", "loop1", "loop2", "abs_in", "fifo"}) EXPECT_FALSE(img->Lookup(p).ok()) << p;
}

TEST_F(LinksTest, StrictRefusesSpecialFiles) {
  std::vector<std::string> warnings;
  auto r = PackWith(src_, tmp_ / "img", false, true, &warnings);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/fifo is a FIFO"), std::string::npos) << r.status().message();
  EXPECT_NE(::access((tmp_ / "img").c_str(), F_OK), 0);
}

TEST_F(LinksTest, ResolveFollowsLinksAsTheKernelDoes) {
  std::vector<std::string> warnings;
  ASSERT_TRUE(PackWith(src_, tmp_ / "img", false, false, &warnings).ok());
  ClientOptions o;
  o.image = tmp_ / "img";
  o.mount = "/fanstore";
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  const Image& img = client.image();
  auto path_of = [&](std::string_view rel, bool follow = true) -> std::string {
    auto t = client.Resolve(rel, follow);
    if (!t.ok()) return "error: " + std::string(CodeName(t.status().code()));
    if (!t->outside.empty()) return "outside: " + t->outside;
    return std::string(img.Get(t->id).path);
  };
  EXPECT_EQ(path_of("lib/libfoo.so"), "lib/libfoo.so.1.2");
  EXPECT_EQ(path_of("lib/libfoo.so", false), "lib/libfoo.so");
  EXPECT_EQ(path_of("lib64/libfoo.so"), "lib/libfoo.so.1.2");     // a link in the middle, then one at the end
  EXPECT_EQ(path_of("lib64/libfoo.so", false), "lib/libfoo.so");  // only the last one is left alone
  EXPECT_EQ(path_of("bin/via"), "lib/libfoo.so.1.2");             // ../lib64 from bin: two links deep
  EXPECT_EQ(path_of("bin/python"), "bin/python3.11");
  EXPECT_EQ(path_of("abs_in"), "lib/libfoo.so.1.2");  // absolute, inside the mount
  EXPECT_EQ(path_of("abs_out"), "outside: /etc");     // absolute, outside it
  EXPECT_EQ(path_of("abs_out/passwd"), "outside: /etc/passwd");
  EXPECT_EQ(path_of("bin/above"), "outside: /");  // ".." above the image's root
  EXPECT_EQ(path_of("bin/above/tmp", false), "outside: /tmp");
  EXPECT_EQ(path_of("dangling"), "error: not found");
  EXPECT_EQ(path_of("dangling", false), "dangling");
  EXPECT_EQ(path_of("loop1"), "error: too many levels of symbolic links");
  EXPECT_EQ(path_of("loop1", false), "loop1");
  EXPECT_EQ(path_of("loop1/x"), "error: too many levels of symbolic links");
  EXPECT_EQ(path_of("long"), "error: name too long");
  EXPECT_EQ(path_of("bin/python3.11/x"), "error: not a directory");
  EXPECT_EQ(path_of("lib64/nothing"), "error: not found");
  EXPECT_EQ(path_of(""), "");
  // stat data: a link reports itself (S_IFLNK, its target's length), hard links one inode.
  struct stat st;
  client.FillStat(*img.Lookup("lib64"), &st);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_size, 3);
  struct stat h1, h2;
  client.FillStat(*img.Lookup("bin/hard"), &h1);
  client.FillStat(*img.Lookup("bin/python3.11"), &h2);
  EXPECT_EQ(h1.st_ino, h2.st_ino);
  EXPECT_EQ(h1.st_nlink, 2u);
  EXPECT_EQ(client.Open(*img.Lookup("lib64")).status().code(), Code::kLoop);  // open(O_NOFOLLOW) of a link

  // A front end that checks search permission is asked before each link is followed, in the order the walk meets
  // them; a "no" ends the walk with kPermission.
  struct Asked {
    const Image* img;
    std::string refuse;
    std::vector<std::string> links;
  };
  Client::LinkCheck ask = [](void* ctx, uint32_t link) {
    auto* a = static_cast<Asked*>(ctx);
    a->links.emplace_back(a->img->Get(link).path);
    return a->links.back() != a->refuse;
  };
  Asked all{&img, "", {}};
  auto t = client.Resolve("bin/via", true, nullptr, ask, &all);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(img.Get(t->id).path, "lib/libfoo.so.1.2");
  EXPECT_EQ(all.links, (std::vector<std::string>{"bin/via", "lib64", "lib/libfoo.so"}));
  Asked refused{&img, "lib64", {}};
  EXPECT_EQ(client.Resolve("bin/via", true, nullptr, ask, &refused).status().code(), Code::kPermission);
  EXPECT_EQ(refused.links, (std::vector<std::string>{"bin/via", "lib64"}));
}

}  // namespace
}  // namespace fanstore
