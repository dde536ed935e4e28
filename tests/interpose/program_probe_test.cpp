// Unit tests of fanstore::ProbeProgram: which programs LD_PRELOAD cannot reach (static, 32-bit/foreign,
// set-ID), PATH search and "#!" interpreters, on files made by the test (and /bin/sh, busybox when present).
#include "fanstore/program_probe.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

namespace fanstore {
namespace {

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fanstore-probe.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf " + dir_).c_str()), 0); }
  std::string Write(const std::string& name, const std::string& bytes, mode_t mode = 0755) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    chmod(p.c_str(), mode);
    return p;
  }
  std::string dir_;
};

// The smallest ELF header the probe reads: class, machine, type, and program headers with or without PT_INTERP.
std::string Elf(unsigned char cls, uint16_t machine, bool interp) {
  std::string b(cls == 2 ? 64 + 56 : 52 + 32, '\0');
  memcpy(b.data(),
         "\x7f"
         "ELF",
         4);
  b[4] = static_cast<char>(cls);
  b[5] = 1;  // little-endian
  b[6] = 1;
  auto put16 = [&](size_t at, uint16_t v) { memcpy(b.data() + at, &v, 2); };
  auto put32 = [&](size_t at, uint32_t v) { memcpy(b.data() + at, &v, 4); };
  put16(16, 2);  // ET_EXEC
  put16(18, machine);
  if (cls == 2) {
    uint64_t phoff = 64;
    memcpy(b.data() + 32, &phoff, 8);
    put16(54, 56);              // e_phentsize
    put16(56, 1);               // e_phnum
    put32(64, interp ? 3 : 1);  // PT_INTERP or PT_LOAD
  } else {
    put32(28, 52);
    put16(42, 32);
    put16(44, 1);
    put32(52, interp ? 3 : 1);
  }
  return b;
}

TEST_F(ProbeTest, ElfKinds) {
  EXPECT_EQ(ProbeProgram(Write("dyn", Elf(2, 62, true))).reach, PreloadReach::kReached);
  ProgramProbe s = ProbeProgram(Write("static", Elf(2, 62, false)));
  EXPECT_EQ(s.reach, PreloadReach::kStatic);
  EXPECT_EQ(s.why, "statically linked");
  EXPECT_EQ(s.program, dir_ + "/static");
  EXPECT_EQ(ProbeProgram(Write("i386", Elf(1, 3, true))).reach, PreloadReach::kForeign);
  EXPECT_EQ(ProbeProgram(Write("arm64", Elf(2, 183, true))).reach, PreloadReach::kForeign);
}

TEST_F(ProbeTest, NotElfMissingOrUnreadableIsReached) {
  EXPECT_EQ(ProbeProgram(Write("text", "just text\n")).reach, PreloadReach::kReached);
  EXPECT_EQ(ProbeProgram(dir_ + "/missing").reach, PreloadReach::kReached);
  EXPECT_EQ(ProbeProgram(Write("short",
                               "\x7f"
                               "EL"))
                .reach,
            PreloadReach::kReached);
  EXPECT_EQ(ProbeProgram(dir_).reach, PreloadReach::kReached);  // a directory
}

TEST_F(ProbeTest, ScriptsAreJudgedByTheirInterpreter) {
  std::string st = Write("static", Elf(2, 62, false));
  ProgramProbe p = ProbeProgram(Write("script", "#!" + st + " -x\necho\n"));
  EXPECT_EQ(p.reach, PreloadReach::kStatic);
  EXPECT_EQ(p.program, st);
  // Two levels of "#!", as the kernel follows them.
  EXPECT_EQ(ProbeProgram(Write("script2", "#! " + dir_ + "/script\n")).reach, PreloadReach::kStatic);
  EXPECT_EQ(ProbeProgram(Write("dynscript", "#!" + Write("dyn", Elf(2, 62, true)) + "\n")).reach,
            PreloadReach::kReached);
}

TEST_F(ProbeTest, PathSearchAsExecvp) {
  Write("static", Elf(2, 62, false));
  Write("static-noexec", Elf(2, 62, false), 0644);
  std::string path = "/nonexistent:" + dir_;
  EXPECT_EQ(ProbeProgram("static", path.c_str()).reach, PreloadReach::kStatic);
  EXPECT_EQ(ProbeProgram("static", path.c_str()).program, dir_ + "/static");
  EXPECT_EQ(ProbeProgram("static-noexec", path.c_str()).reach, PreloadReach::kReached);  // not executable: skipped
  EXPECT_EQ(ProbeProgram("static", "/nonexistent").reach, PreloadReach::kReached);
}

TEST_F(ProbeTest, SetUserIdThatChangesTheIds) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  std::string p = Write("suid", Elf(2, 62, true));
  ASSERT_EQ(chown(p.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(p.c_str(), 04755), 0);
  ProgramProbe s = ProbeProgram(p);
  EXPECT_EQ(s.reach, PreloadReach::kSecure);
  EXPECT_EQ(s.why, "set-user-ID");
  // Set-UID to ourselves changes nothing: the loader keeps LD_PRELOAD.
  ASSERT_EQ(chown(p.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(p.c_str(), 04755), 0);
  EXPECT_EQ(ProbeProgram(p).reach, PreloadReach::kReached);
}

TEST_F(ProbeTest, SystemPrograms) {
  EXPECT_EQ(ProbeProgram("/bin/sh").reach, PreloadReach::kReached);
  if (access("/usr/bin/busybox", X_OK) != 0) GTEST_SKIP() << "busybox-static is not installed";
  EXPECT_EQ(ProbeProgram("busybox", "/usr/bin").reach, PreloadReach::kStatic);
}

TEST_F(ProbeTest, ProbeElfFdLeavesTheOffset) {
  int fd = open(Write("static", Elf(2, 62, false)).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(lseek(fd, 5, SEEK_SET), 5);
  std::string why;
  EXPECT_EQ(ProbeElfFd(fd, &why), PreloadReach::kStatic);
  EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 5);
  close(fd);
}

}  // namespace
}  // namespace fanstore
