// Pack: determinism, awkward names, symlinks, balance, replication, bad input and injected write faults.
#include <grp.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "pack_tree.hpp"
#include "test_util.hpp"
#include "write_env.hpp"

namespace fanstore {
namespace {

using test::TempDir;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void MakeMixedTree(const std::string& src) {
  for (int i = 0; i < 60; ++i) {
    std::string dir = "c" + std::to_string(i % 4) + "/s" + std::to_string(i % 3) + "/";
    test::WriteFile(src + "/" + dir + "f" + std::to_string(i),
                    i % 2 ? test::TextBytes(1000 + 397 * i, i) : test::RandomBytes(500 + 211 * i, i));
  }
  test::WriteFile(src + "/empty", "");
  test::MakeDirs(src + "/emptydir");
}

std::map<std::string, std::string> ImageBytes(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& n : ListDir(dir)) m[n] = test::ReadAll(dir + "/" + n);
  return m;
}

TEST(PackTest, DeterministicAcrossRunsAndThreadCounts) {
  TempDir tmp;
  MakeMixedTree(tmp / "src");
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img1", 3, {"c1/*"}, 1).ok());
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img2", 3, {"c1/*"}, 4).ok());
  auto a = ImageBytes(tmp / "img1"), b = ImageBytes(tmp / "img2");
  ASSERT_EQ(a.size(), 5u);  // index + 3 parts + replicated
  EXPECT_TRUE(a == b);
}

// Holes are read as zeros without reading them (SEEK_DATA): data before, between and after holes, unaligned to
// chunks and blocks, a file that begins with a hole and one that ends in one, all read back byte for byte.
TEST(PackTest, SparseFilesReadBackExactly) {
  TempDir tmp;
  test::MakeDirs(tmp / "src");
  auto sparse = [&](const std::string& name, uint64_t size, const std::vector<std::pair<uint64_t, std::string>>& data) {
    int fd = ::open((tmp / "src/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    for (const auto& [at, bytes] : data)
      ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(at)), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  };
  const std::string a(5000, 'a'), b(70000, 'b');
  sparse("middle", (5u << 20) + 3, {{0, a}, {(1u << 20) + 8192, a}, {(3u << 20) + 5, b}, {(5u << 20) - 2, "zz"}});
  sparse("leading", (2u << 20) + 11, {{2u << 20, "end"}});
  sparse("trailing", (3u << 20) + 7, {{100, b}});
  sparse("allhole", (1u << 20) + 1, {});
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 2, {}, 2, nullptr, 1u << 20).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  for (const char* name : {"middle", "leading", "trailing", "allhole"}) {
    std::string want = test::ReadAll(tmp / "src/" + std::string(name));
    EXPECT_EQ(test::ReadImageFile(*img, name), want) << name;
    EXPECT_TRUE(img->CheckFile(*img->Lookup(name)).ok()) << name;
  }
}

TEST(PackTest, EdgeCaseNames) {
  TempDir tmp;
  const std::string src = tmp / "src";
  std::vector<std::string> rels = {"with space/a file", "unicode/日本語/é.txt",     "new\nline/x\ny",
                                   "tab\tname",         std::string(NAME_MAX, 'n'), "-dash",
                                   ".hidden/.x"};
  // A path whose absolute form is just under PATH_MAX: directories of 200 characters.
  std::string deep;
  while (src.size() + 1 + deep.size() + 201 + 20 < PATH_MAX) deep += std::string(200, 'd') + "/";
  deep += std::string(PATH_MAX - 2 - src.size() - 1 - deep.size() - 1, 'f');
  rels.push_back(deep);
  for (size_t i = 0; i < rels.size(); ++i) test::WriteFile(src + "/" + rels[i], "content " + std::to_string(i));
  ASSERT_TRUE((src + "/" + deep).size() < PATH_MAX && (src + "/" + deep).size() > PATH_MAX - 10);
  auto r = test::PackTree(src, tmp / "img");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  for (size_t i = 0; i < rels.size(); ++i)
    EXPECT_EQ(test::ReadImageFile(*img, rels[i]), "content " + std::to_string(i));
}

// --follow-symlinks: links become what they point at (links_test.cpp covers the default, links kept).
TEST(PackTest, FollowedSymlinksDanglingSkippedLoopsDetected) {
  TempDir tmp;
  const std::string src = tmp / "src";
  test::WriteFile(src + "/real/file.txt", "target");
  test::WriteFile(tmp / "outside/o.txt", "outside");
  ASSERT_EQ(::symlink("real/file.txt", (src + "/link_file").c_str()), 0);
  ASSERT_EQ(::symlink("real", (src + "/link_dir").c_str()), 0);
  ASSERT_EQ(::symlink((tmp / "outside").c_str(), (src + "/link_out").c_str()), 0);
  ASSERT_EQ(::symlink("nowhere", (src + "/dangling").c_str()), 0);
  ASSERT_EQ(::symlink("..", (src + "/real/up").c_str()), 0);  // loops back to src
  ASSERT_EQ(::symlink(".", (src + "/self").c_str()), 0);
  ASSERT_EQ(::mkfifo((src + "/fifo").c_str(), 0644), 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string sp = src + "/sock";
  bool have_sock = sp.size() < sizeof addr.sun_path;
  if (have_sock) {
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sp.c_str());
    have_sock = ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  std::vector<std::string> warnings;
  PackOptions o;
  o.source = src;
  o.output = tmp / "img";
  o.threads = 2;
  o.follow_symlinks = true;
  auto r = Pack(o, {}, [&warnings](const std::string& w) { warnings.push_back(w); });
  ::close(sock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // dangling, real/up, link_dir/up (the same loop seen through the link), self, fifo (+ sock)
  EXPECT_EQ(r->skipped, have_sock ? 6u : 5u);
  EXPECT_EQ(warnings.size(), 5u);  // the special files share one line
  auto img = test::OpenOrDie(tmp / "img");
  EXPECT_EQ(test::ReadImageFile(*img, "link_file"), "target");
  EXPECT_TRUE(img->Get(*img->Lookup("link_file")).is_reg());
  EXPECT_TRUE(img->Get(*img->Lookup("link_dir")).is_dir());
  EXPECT_EQ(test::ReadImageFile(*img, "link_dir/file.txt"), "target");
  EXPECT_EQ(test::ReadImageFile(*img, "link_out/o.txt"), "outside");
  // One file reached by three names (itself, a link to it, through a link to its directory) is stored once, with
  // one inode and three links, as hard links are.
  const Entry real = img->Get(*img->Lookup("real/file.txt"));
  for (const char* p : {"link_file", "link_dir/file.txt"}) {
    const Entry e = img->Get(*img->Lookup(p));
    EXPECT_EQ(e.ino, real.ino) << p;
    EXPECT_EQ(e.nlink, 3u) << p;
  }
  EXPECT_EQ(real.nlink, 3u);
  for (const char* p : {"dangling", "real/up", "self", "fifo", "sock"}) EXPECT_FALSE(img->Lookup(p).ok()) << p;
  bool saw_dangling = false, saw_loop = false;
  for (const auto& w : warnings) {
    saw_dangling |= w == "skipping dangling symlink dangling";
    saw_loop |= w.find("real/up") != std::string::npos && w.find("loop") != std::string::npos;
  }
  EXPECT_TRUE(saw_dangling);
  EXPECT_TRUE(saw_loop);
}

TEST(PackTest, PartitionsBalancedByBytes) {
  TempDir tmp;
  uint64_t largest = 0;
  for (int i = 0; i < 50; ++i) {
    size_t n = 1000 + static_cast<size_t>((i * 7919) % 50000);
    largest = std::max<uint64_t>(largest, n);
    test::WriteFile(tmp / ("src/f" + std::to_string(i)), test::RandomBytes(n, i));  // raw: stored == size
  }
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 4).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ImageSummary s = img->Summary();
  ASSERT_EQ(s.part_bytes.size(), 4u);
  EXPECT_EQ(s.replicated_part, kNoPartition);
  auto [mn, mx] = std::minmax_element(s.part_bytes.begin(), s.part_bytes.end());
  EXPECT_LE(*mx - *mn, largest);
  uint64_t files = 0;
  for (auto f : s.part_files) files += f;
  EXPECT_EQ(files, 50u);
  EXPECT_EQ(VerifyImage(*img, 2, {}), 0u);
}

TEST(PackTest, ReplicateGlobsMatchDeepFiles) {
  TempDir tmp;
  test::WriteFile(tmp / "src/train/a/1", "t1");
  test::WriteFile(tmp / "src/val/a/b/2", "v2");
  test::WriteFile(tmp / "src/val/3", "v3");
  test::WriteFile(tmp / "src/meta.json", "{}");
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 2, {"val/*", "*.json"}).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ImageSummary s = img->Summary();
  ASSERT_EQ(s.replicated_part, 2u);
  EXPECT_EQ(img->PartitionCount(), 3u);
  for (const char* p : {"val/a/b/2", "val/3", "meta.json"}) EXPECT_EQ(img->Get(*img->Lookup(p)).part, 2u) << p;
  EXPECT_LT(img->Get(*img->Lookup("train/a/1")).part, 2u);
  EXPECT_EQ(s.part_files[2], 3u);
  EXPECT_NE(img->PartitionPath(2).find("part-rep.fsp"), std::string::npos);
  EXPECT_EQ(test::ReadImageFile(*img, "val/a/b/2"), "v2");
}

// A hard-linked file belongs to the replicated partition when any of its names matches, not only its first.
TEST(PackTest, ReplicateGlobMatchesAnyNameOfAHardLink) {
  TempDir tmp;
  test::WriteFile(tmp / "src/val/x", test::RandomBytes(1000, 1));
  test::MakeDirs(tmp / "src/train");
  ASSERT_EQ(::link((tmp / "src/val/x").c_str(), (tmp / "src/train/x").c_str()), 0);  // "train/x" sorts first
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 2, {"val/*"}).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_EQ(img->Summary().replicated_part, 2u);
  for (const char* p : {"val/x", "train/x"}) EXPECT_EQ(img->Get(*img->Lookup(p)).part, 2u) << p;
  EXPECT_EQ(test::ReadImageFile(*img, "val/x"), test::RandomBytes(1000, 1));
}

TEST(PackTest, EmptySourceAndEmptyOutputDirectory) {
  TempDir tmp;
  test::MakeDirs(tmp / "src");
  test::MakeDirs(tmp / "img");  // an existing empty directory is fine
  auto r = test::PackTree(tmp / "src", tmp / "img", 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 0u);
  EXPECT_EQ(r->dirs, 1u);
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  EXPECT_EQ(img->size(), 1u);
  EXPECT_EQ(img->ChildCount(kRootId), 0u);
}

TEST(PackTest, BadInputIsRefusedWithoutSideEffects) {
  TempDir tmp;
  test::WriteFile(tmp / "src/a", "a");
  auto r = test::PackTree(tmp / "missing", tmp / "img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  r = test::PackTree(tmp / "src/a", tmp / "img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotDirectory);
  test::WriteFile(tmp / "full/keep", "keep");
  r = test::PackTree(tmp / "src", tmp / "full");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kExists);
  EXPECT_EQ(test::ReadAll(tmp / "full/keep"), "keep");
  r = test::PackTree(tmp / "src", tmp / "src/img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  r = test::PackTree(tmp / "src", tmp / "no/such/parent/img");
  ASSERT_FALSE(r.ok());
  PackOptions o;
  o.source = tmp / "src";
  o.output = tmp / "img";
  o.parts = 0;
  EXPECT_EQ(Pack(o).status().code(), Code::kInvalidArgument);
  o.parts = 1;
  o.level = 99;
  EXPECT_EQ(Pack(o).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"full", "src"}));
}

// Runs `pack` in a forked child that first drops root for a uid and gid no account uses (what `setpriv --reuid=U
// --regid=U --clear-groups` does; the capabilities go with uid 0), after handing `tree` to that uid. Root's
// CAP_DAC_OVERRIDE reads even a mode-0 directory, so only an unprivileged process meets the refusal; CI runs as root.
// Returns the child's exit status: 0 when pack succeeded, 10 + the Status code when it failed.
int PackAsThrowawayUser(const std::string& tree, const std::function<Status()>& pack) {
  uid_t uid = 61000;
  while (::getpwuid(uid) != nullptr || ::getgrgid(uid) != nullptr) ++uid;
  std::function<void(const std::string&)> chown_all = [&](const std::string& p) {
    EXPECT_EQ(::lchown(p.c_str(), uid, uid), 0) << p << ": " << std::strerror(errno);
    for (const auto& n : ListDir(p)) chown_all(p + "/" + n);
  };
  chown_all(tree);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      std::fprintf(stderr, "cannot drop root for uid %u: %s\n", static_cast<unsigned>(uid), std::strerror(errno));
      ::_exit(3);
    }
    Status st = pack();
    ::_exit(st.ok() ? 0 : 10 + static_cast<int>(st.code()));
  }
  int wstatus = 0;
  EXPECT_EQ(::waitpid(pid, &wstatus, 0), pid);
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

TEST(PackTest, UnreadableDirectoryFailsCleanly) {
  TempDir tmp;
  test::WriteFile(tmp / "src/locked/a", "a");
  ::chmod((tmp / "src/locked").c_str(), 0);
  auto pack = [&] {
    auto r = test::PackTree(tmp / "src", tmp / "img");
    return r.ok() ? Status::Ok() : r.status();
  };
  if (::geteuid() == 0) {
    int exit_status = PackAsThrowawayUser(tmp.path(), pack);
    ASSERT_NE(exit_status, 3) << "the child could not drop root (message above)";
    EXPECT_EQ(exit_status, 10 + static_cast<int>(Code::kPermission)) << "0: pack read the unreadable directory";
  } else {
    Status st = pack();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Code::kPermission);
  }
  ::chmod((tmp / "src/locked").c_str(), 0755);
  EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"src"}));
}

// A write env whose write/pwrite give up with ENOSPC after `budget` bytes in total.
struct DiskFull {
  explicit DiskFull(int64_t budget) : left(budget) {}
  std::atomic<int64_t> left;
  ssize_t Take(size_t n) {
    int64_t l = left.load();
    if (l <= 0) {
      errno = ENOSPC;
      return -1;
    }
    size_t k = std::min<size_t>(n, static_cast<size_t>(l));
    left -= static_cast<int64_t>(k);
    return static_cast<ssize_t>(k);  // a short write first, then ENOSPC on the retry
  }
  std::unique_ptr<WriteEnv> Env() {
    WriteSyscalls c;
    c.write = [this](int fd, const void* b, size_t n) {
      ssize_t k = Take(n);
      return k < 0 ? k : ::write(fd, b, static_cast<size_t>(k));
    };
    c.pwrite = [this](int fd, const void* b, size_t n, off_t o) {
      ssize_t k = Take(n);
      return k < 0 ? k : ::pwrite(fd, b, static_cast<size_t>(k), o);
    };
    return NewPosixWriteEnv(std::move(c));
  }
};

TEST(PackFaultTest, DiskFullLeavesNoImage) {
  TempDir tmp;
  MakeMixedTree(tmp / "src");
  PackOptions o;
  o.source = tmp / "src";
  o.output = tmp / "img";
  o.parts = 2;
  o.threads = 2;
  auto full = PackWithEnv(o, DefaultWriteEnv(), {}, {});
  ASSERT_TRUE(full.ok());
  uint64_t total = 0;
  for (const auto& [n, bytes] : ImageBytes(tmp / "img")) total += bytes.size();
  TempDir::RemoveAll(tmp / "img");
  for (int64_t budget : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1000}, int64_t(total / 2),
                         int64_t(total - 200), int64_t(total - 1)}) {
    DiskFull disk(budget);
    auto env = disk.Env();
    auto r = PackWithEnv(o, env.get(), {}, {});
    ASSERT_FALSE(r.ok()) << budget;
    EXPECT_EQ(r.status().code(), Code::kNoSpace) << budget << " " << r.status().ToString();
    EXPECT_NE(r.status().message().find("free space"), std::string::npos);
    EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"src"})) << budget;
  }
}

TEST(PackFaultTest, TheStopFlagEndsThePackAndLeavesNothing) {
  // What `fanstore pack` sets on SIGINT/SIGTERM/SIGHUP: before the walk, and once the partitions are being written.
  TempDir tmp;
  MakeMixedTree(tmp / "src");
  std::atomic<bool> stop{false};
  PackOptions o;
  o.source = tmp / "src";
  o.output = tmp / "img";
  o.parts = 2;
  o.stop = &stop;
  for (bool at_first_write : {false, true}) {
    stop = !at_first_write;
    WriteSyscalls c;
    c.write = [&](int fd, const void* b, size_t n) {
      stop = true;
      return ::write(fd, b, n);
    };
    auto env = NewPosixWriteEnv(std::move(c));
    auto r = PackWithEnv(o, env.get(), {}, {});
    ASSERT_FALSE(r.ok()) << at_first_write;
    EXPECT_EQ(r.status().message(), "interrupted");
    EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"src"})) << at_first_write;
  }
  stop = false;
  o.stop = nullptr;
  EXPECT_TRUE(PackWithEnv(o, DefaultWriteEnv(), {}, {}).ok());
}

TEST(PackFaultTest, ShortWritesStillProduceTheSameImage) {
  TempDir tmp;
  MakeMixedTree(tmp / "src");
  PackOptions o;
  o.source = tmp / "src";
  o.output = tmp / "img1";
  o.parts = 2;
  ASSERT_TRUE(Pack(o).ok());
  WriteSyscalls c;
  c.write = [](int fd, const void* b, size_t n) { return ::write(fd, b, std::min<size_t>(n, 7)); };
  c.pwrite = [](int fd, const void* b, size_t n, off_t off) { return ::pwrite(fd, b, std::min<size_t>(n, 5), off); };
  auto env = NewPosixWriteEnv(std::move(c));
  o.output = tmp / "img2";
  ASSERT_TRUE(PackWithEnv(o, env.get(), {}, {}).ok());
  EXPECT_TRUE(ImageBytes(tmp / "img1") == ImageBytes(tmp / "img2"));
}

}  // namespace
}  // namespace fanstore
