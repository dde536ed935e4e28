// What programs see through the mount: stat data and inode numbers from the image, listings with d_type,
// the true bytes, EROFS for every modification, ENOENT/ENOTDIR, EIO for a corrupt file, concurrent reads.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fanstore/image.hpp"
#include "fuse_test_env.hpp"
#include "fuse_test_util.hpp"

namespace fanstore::fusetest {
namespace {

std::shared_ptr<const Image> OpenImage() {
  auto img = Image::Open(Env().image);
  EXPECT_TRUE(img.ok()) << img.status().ToString();
  return img.ok() ? *img : nullptr;
}

std::string M(const std::string& rel) { return rel.empty() ? Env().mnt : Env().mnt + "/" + rel; }

TEST(FuseStat, EveryEntryMatchesTheImageAndTheSource) {
  auto img = OpenImage();
  ASSERT_NE(img, nullptr);
  std::set<uint64_t> inos;
  for (uint32_t id = 0; id < img->size(); ++id) {
    const Entry e = img->Get(id);
    const std::string rel(e.path);
    struct stat st;
    ASSERT_EQ(::stat(M(rel).c_str(), &st), 0) << rel << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_ino, e.ino) << rel;  // the image's stable inode, not FUSE's node id
    EXPECT_EQ(st.st_mode, e.mode) << rel;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), e.size) << rel;
    EXPECT_EQ(st.st_nlink, e.nlink) << rel;
    EXPECT_EQ(st.st_mtim.tv_sec, e.mtime_sec) << rel;
    EXPECT_EQ(st.st_mtim.tv_nsec, static_cast<long>(e.mtime_nsec)) << rel;
    inos.insert(st.st_ino);
    struct stat src;
    ASSERT_EQ(::stat((Env().src + (rel.empty() ? "" : "/" + rel)).c_str(), &src), 0) << rel;
    EXPECT_EQ(st.st_mode & S_IFMT, src.st_mode & S_IFMT) << rel;
    if (S_ISREG(src.st_mode)) {
      EXPECT_EQ(st.st_size, src.st_size) << rel;
    }
    EXPECT_EQ(st.st_mtim.tv_sec, src.st_mtim.tv_sec) << rel;
  }
  EXPECT_EQ(inos.size(), img->size()) << "inode numbers must be unique";
}

TEST(FuseStat, FstatAndLstatAgreeWithStat) {
  struct stat a, b, c;
  ASSERT_EQ(::stat(M("train/cat/0002.jpg").c_str(), &a), 0);
  ASSERT_EQ(::lstat(M("train/cat/0002.jpg").c_str(), &b), 0);
  const int fd = ::open(M("train/cat/0002.jpg").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fstat(fd, &c), 0);
  ::close(fd);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_ino, c.st_ino);
  EXPECT_EQ(a.st_size, c.st_size);
}

TEST(FuseReaddir, ListingsHaveNamesDtypesAndInodesOfTheImage) {
  auto img = OpenImage();
  ASSERT_NE(img, nullptr);
  for (uint32_t id = 0; id < img->size(); ++id) {
    const Entry d = img->Get(id);
    if (!d.is_dir()) continue;
    DIR* dir = ::opendir(M(std::string(d.path)).c_str());
    ASSERT_NE(dir, nullptr) << d.path;
    std::map<std::string, std::pair<unsigned char, ino_t>> seen;
    while (const dirent* de = ::readdir(dir)) seen[de->d_name] = {de->d_type, de->d_ino};
    ::closedir(dir);
    ASSERT_EQ(seen.size(), img->ChildCount(id) + 2u) << d.path;
    EXPECT_EQ(seen["."].first, DT_DIR);
    EXPECT_EQ(seen[".."].first, DT_DIR);
    EXPECT_EQ(seen["."].second, d.ino);
    for (uint32_t i = 0; i < img->ChildCount(id); ++i) {
      const Entry c = img->Get(img->Child(id, i));
      auto it = seen.find(std::string(c.name));
      ASSERT_NE(it, seen.end()) << c.path;
      EXPECT_EQ(it->second.first, c.d_type()) << c.path;
      EXPECT_EQ(it->second.second, c.ino) << c.path;
    }
  }
}

TEST(FuseReaddir, LargeDirectoryResumesAcrossBuffersAndSeeks) {
  DIR* dir = ::opendir(M("many").c_str());
  ASSERT_NE(dir, nullptr);
  std::vector<std::string> names;
  long mid = -1;
  while (const dirent* de = ::readdir(dir)) {
    names.push_back(de->d_name);
    if (names.size() == 150) mid = ::telldir(dir);
  }
  EXPECT_EQ(names.size(), 302u);
  ASSERT_GE(mid, 0);
  ::seekdir(dir, mid);
  const dirent* de = ::readdir(dir);
  ASSERT_NE(de, nullptr);
  EXPECT_EQ(de->d_name, names[150]);
  ::closedir(dir);
}

TEST(FuseRead, EveryFileHasItsTrueBytes) {
  auto img = OpenImage();
  ASSERT_NE(img, nullptr);
  for (uint32_t id = 0; id < img->size(); ++id) {
    const Entry e = img->Get(id);
    if (!e.is_reg() || e.path == "bad.bin") continue;
    const std::string rel(e.path);
    EXPECT_EQ(ReadWholeFile(M(rel)), ReadWholeFile(Env().src + "/" + rel)) << rel;
  }
}

TEST(FuseRead, PreadAtEdgesMmapAndEof) {
  const std::string want = ReadWholeFile(Env().src + "/train/cat/0001.jpg");
  const int fd = ::open(M("train/cat/0001.jpg").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[100];
  ASSERT_EQ(::pread(fd, buf, sizeof buf, static_cast<off_t>(want.size() - 10)), 10);
  EXPECT_EQ(std::string(buf, 10), want.substr(want.size() - 10));
  EXPECT_EQ(::pread(fd, buf, sizeof buf, static_cast<off_t>(want.size())), 0);
  EXPECT_EQ(::pread(fd, buf, sizeof buf, static_cast<off_t>(want.size() + 4096)), 0);
  void* p = ::mmap(nullptr, want.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(std::memcmp(p, want.data(), want.size()), 0);
  ::munmap(p, want.size());
  ::close(fd);
  const int efd = ::open(M("empty.bin").c_str(), O_RDONLY);
  ASSERT_GE(efd, 0);
  EXPECT_EQ(::read(efd, buf, sizeof buf), 0);
  ::close(efd);
}

TEST(FuseRead, ReopenWithoutPageCacheLoadsLazilyAndCorrectly) {
  // The first open verifies and loads; later opens defer the load to a read that misses the page cache.
  // Dropping the file's pages (fadvise) and O_DIRECT both force such reads to reach the server.
  const std::string rel = "train/dog/0001.jpg";
  const std::string want = ReadWholeFile(Env().src + "/" + rel);
  EXPECT_EQ(ReadWholeFile(M(rel)), want);
  const int fd = ::open(M(rel).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  std::string got(want.size(), '\0');
  EXPECT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(want.size()));
  EXPECT_EQ(got, want);
  ::close(fd);
  const int dfd = ::open(M(rel).c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(dfd, 0) << std::strerror(errno);
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, 1 << 20), 0);
  const ssize_t n = ::pread(dfd, buf, 1 << 20, 0);
  EXPECT_EQ(n, static_cast<ssize_t>(want.size()));
  EXPECT_EQ(std::memcmp(buf, want.data(), want.size()), 0);
  std::free(buf);
  ::close(dfd);
}

TEST(FuseErrors, EveryModificationIsErofs) {
  const std::string f = M("hello.txt"), d = M("docs"), nf = M("new.txt"), nd = M("newdir");
  auto expect_erofs = [](int rc, const char* what) {
    EXPECT_EQ(rc, -1) << what;
    EXPECT_EQ(errno, EROFS) << what << ": " << std::strerror(errno);
  };
  expect_erofs(::open(f.c_str(), O_WRONLY), "open O_WRONLY");
  expect_erofs(::open(f.c_str(), O_RDWR), "open O_RDWR");
  expect_erofs(::open(f.c_str(), O_RDONLY | O_TRUNC), "open O_TRUNC");
  expect_erofs(::open(nf.c_str(), O_WRONLY | O_CREAT, 0644), "open O_CREAT");
  expect_erofs(::mkdir(nd.c_str(), 0755), "mkdir");
  expect_erofs(::unlink(f.c_str()), "unlink");
  expect_erofs(::rmdir(M("emptydir").c_str()), "rmdir");
  expect_erofs(::rename(f.c_str(), nf.c_str()), "rename");
  expect_erofs(::link(f.c_str(), nf.c_str()), "link");
  expect_erofs(::symlink("x", nf.c_str()), "symlink");
  expect_erofs(::truncate(f.c_str(), 0), "truncate");
  expect_erofs(::chmod(f.c_str(), 0600), "chmod");
  expect_erofs(::utimes(f.c_str(), nullptr), "utimes");
  expect_erofs(::setxattr(f.c_str(), "user.x", "1", 1, 0), "setxattr");
  expect_erofs(::removexattr(f.c_str(), "user.x"), "removexattr");
  expect_erofs(::mknod(nf.c_str(), S_IFIFO | 0644, 0), "mknod");
}

TEST(FuseErrors, MissingIsEnoentAndThroughAFileIsEnotdir) {
  struct stat st;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass is answered from the negative-entry cache
    EXPECT_EQ(::stat(M("no/such/file").c_str(), &st), -1);
    EXPECT_EQ(errno, ENOENT);
    EXPECT_EQ(::stat(M("nosuch.txt").c_str(), &st), -1);
    EXPECT_EQ(errno, ENOENT);
    EXPECT_EQ(::open(M("train/nosuch.jpg").c_str(), O_RDONLY), -1);
    EXPECT_EQ(errno, ENOENT);
  }
  EXPECT_EQ(::stat(M("hello.txt/x").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(::opendir(M("hello.txt").c_str()), nullptr);
  EXPECT_EQ(errno, ENOTDIR);
  char buf[16];
  EXPECT_EQ(::readlink(M("hello.txt").c_str(), buf, sizeof buf), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::getxattr(M("hello.txt").c_str(), "user.x", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENODATA);
}

TEST(FuseErrors, CorruptFileIsEioNeverWrongBytes) {
  struct stat st;
  ASSERT_EQ(::stat(M("bad.bin").c_str(), &st), 0);  // metadata is fine; only the bytes are bad
  for (int i = 0; i < 2; ++i) {                     // and stays bad: nothing wrong gets cached
    // Opening reads nothing (as for any file of a large image); the first read of the damaged chunk is EIO.
    const int fd = ::open(M("bad.bin").c_str(), O_RDONLY);
    if (fd < 0) {
      EXPECT_EQ(errno, EIO) << std::strerror(errno);
      continue;
    }
    char buf[65536];
    EXPECT_EQ(::read(fd, buf, sizeof buf), -1);
    EXPECT_EQ(errno, EIO) << std::strerror(errno);
    ::close(fd);
  }
}

TEST(FuseStatfs, ReportsReadOnly) {
  struct statvfs sv;
  ASSERT_EQ(::statvfs(Env().mnt.c_str(), &sv), 0);
  EXPECT_TRUE(sv.f_flag & ST_RDONLY);
  EXPECT_GT(sv.f_blocks, 0u);
  EXPECT_EQ(sv.f_bavail, 0u);
  EXPECT_GT(sv.f_files, 300u);
}

TEST(FuseConcurrency, ManyThreadsReadTheSameAndDifferentFiles) {
  std::vector<std::string> rels = {"train/cat/0001.jpg", "train/cat/0002.jpg", "train/dog/0001.jpg", "docs/text.txt"};
  for (int i = 0; i < 300; i += 7) {
    char name[32];
    std::snprintf(name, sizeof name, "many/f%04d.dat", i);
    rels.push_back(name);
  }
  std::vector<std::string> want;
  for (const auto& r : rels) want.push_back(ReadWholeFile(Env().src + "/" + r));
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int iter = 0; iter < 200; ++iter) {
        const size_t k = rng() % rels.size();
        const int fd = ::open(M(rels[k]).c_str(), O_RDONLY);
        if (fd < 0) {
          ++failures;
          continue;
        }
        const std::string& w = want[k];
        const size_t off = w.empty() ? 0 : rng() % w.size();
        const size_t len = std::min<size_t>(w.size() - off, 1 + rng() % (256 * 1024));
        std::string got(len, '\0');
        const ssize_t n = ::pread(fd, got.data(), len, static_cast<off_t>(off));
        if (n != static_cast<ssize_t>(len) || got != w.substr(off, len)) ++mismatches;
        ::close(fd);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace fanstore::fusetest
