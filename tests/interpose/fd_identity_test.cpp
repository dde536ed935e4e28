// fd identity under `fanstore run`: image fds closed behind the library's back by a raw close_range (through
// syscall(2), or an inline `syscall` instruction libc never sees), then the numbers reused for pipes, sockets,
// memfds and real files -- those fds must behave as what they are now (never image data), image files must
// still read right (the image's partition fds were closed too), and nothing may fault.
// Usage: fd_identity_test SOURCE_TREE MOUNT    (files: small.txt, raw/large.bin, raw/fresh1..3.bin; each
// fresh file is read for the first time after a close, so the image must reach its partition again)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

int g_failed = 0;
void Check(bool ok, const std::string& what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return "<open " + path + ": " + strerror(errno) + ">";
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  if (n < 0) out = "<read " + path + ": " + strerror(errno) + ">";
  close(fd);
  return out;
}

// close_range(3, ~0U) with the syscall instruction itself: no libc, no wrapper, no syscall(2).
long InlineCloseRange(unsigned first) {
  long ret;
  register long r10 __asm__("r10") = 0;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(static_cast<long>(SYS_close_range)), "D"(static_cast<long>(first)), "S"(~0UL), "d"(0L),
                     "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
}
long InlineMemfd(const char* name) {
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(static_cast<long>(SYS_memfd_create)), "D"(name), "S"(0L)
                   : "rcx", "r11", "memory");
  return ret;
}

// Opens image files so that lazy fds, the preload's placeholder and the image's partition fds all exist.
std::vector<int> OpenImageFiles(const std::string& mnt) {
  std::vector<int> fds;
  for (const char* f : {"/small.txt", "/raw/large.bin"}) {
    int fd = open((mnt + f).c_str(), O_RDONLY);
    char c;
    if (fd >= 0 && read(fd, &c, 1) != 1) fd = -1;
    fds.push_back(fd);
  }
  return fds;
}

// New files on the numbers just freed: each must answer as itself.
void NewFilesBehaveAsThemselves(const std::string& tag, const std::vector<int>& old_numbers) {
  int p[2];
  Check(pipe(p) == 0, tag + ": pipe");
  Check(write(p[1], "pipe-data", 9) == 9, tag + ": write to the pipe");
  int sv[2];
  Check(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, tag + ": socketpair");
  int m = memfd_create("identity", 0);
  Check(m >= 0 && write(m, "memfd", 5) == 5, tag + ": memfd_create");
  int h = open("/proc/self/exe", O_RDONLY);
  Check(h >= 0, tag + ": open a real file");
  struct stat st;
  Check(fstat(p[0], &st) == 0 && S_ISFIFO(st.st_mode), tag + ": fstat(pipe) is a FIFO, fd " + std::to_string(p[0]));
  Check(fstat(sv[0], &st) == 0 && S_ISSOCK(st.st_mode),
        tag + ": fstat(socket) is a socket, fd " + std::to_string(sv[0]));
  Check(fstat(m, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5, tag + ": fstat(memfd) has size 5");
  struct stat exe;
  Check(fstat(h, &st) == 0 && stat("/proc/self/exe", &exe) == 0 && st.st_ino == exe.st_ino,
        tag + ": fstat(real file) is that file");
  char buf[32] = {0};
  Check(read(p[0], buf, sizeof buf) == 9 && memcmp(buf, "pipe-data", 9) == 0,
        tag + ": read(pipe) gets the pipe's bytes");
  Check(pread(m, buf, 5, 0) == 5 && memcmp(buf, "memfd", 5) == 0, tag + ": pread(memfd) gets the memfd's bytes");
  Check(lseek(m, 0, SEEK_END) == 5, tag + ": lseek(memfd) is the memfd's");
  void* map = mmap(nullptr, 5, PROT_READ, MAP_SHARED, m, 0);
  Check(map != MAP_FAILED && memcmp(map, "memfd", 5) == 0, tag + ": mmap(memfd) maps the memfd");
  if (map != MAP_FAILED) munmap(map, 5);
  // An old number that now holds one of these must not answer from the image.
  for (int fd : old_numbers) {
    if (fd < 0) continue;
    if (fstat(fd, &st) == 0)
      Check(!(S_ISREG(st.st_mode) && st.st_size == 4096 * 300),
            tag + ": old number " + std::to_string(fd) + " does not report the image file's size");
  }
  for (int fd : {p[0], p[1], sv[0], sv[1], m, h}) close(fd);
}

// `fresh` has not been read before: its bytes come from the partition, through the image's partition fd.
void ImageStillReads(const std::string& tag, const std::string& src, const std::string& mnt, const char* fresh) {
  for (const char* f : {"/small.txt", "/raw/large.bin", fresh})
    Check(ReadAll(mnt + f) == ReadAll(src + f), tag + ": " + f + " reads the source's bytes");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fd_identity_test SOURCE_TREE MOUNT\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string src = argv[1], mnt = argv[2];

  // 1. syscall(SYS_close_range, ...): glibc's syscall(), which the preload routes like close_range().
  std::vector<int> old = OpenImageFiles(mnt);
  Check(old[0] >= 0 && old[1] >= 0, "syscall: image files open");
  Check(syscall(SYS_close_range, 3, ~0U, 0) == 0, "syscall: close_range(3, ~0U)");
  NewFilesBehaveAsThemselves("syscall", old);
  ImageStillReads("syscall", src, mnt, "/raw/fresh1.bin");

  // 2. The syscall instruction itself: the preload never sees the close. Numbers handed out again by libc
  // (pipe, socketpair, memfd_create, open) are recognised as new; the image reopens its partitions.
  old = OpenImageFiles(mnt);
  Check(old[0] >= 0 && old[1] >= 0, "inline: image files open");
  Check(InlineCloseRange(3) == 0, "inline: close_range(3, ~0U)");
  // Small files on every low number first: a partition fd number read as a partition would fault (SIGBUS).
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) {
    int f = memfd_create("filler", 0);
    if (f >= 0 && write(f, "x", 1) == 1) fillers.push_back(f);
  }
  ImageStillReads("inline", src, mnt, "/raw/fresh2.bin");
  for (int f : fillers) close(f);
  NewFilesBehaveAsThemselves("inline", old);

  // 3. Closed and reused without libc at all: whatever the preload still believes about the number, a call
  // that hands the fd to the kernel (mmap materializes a lazy fd) must not replace the new file.
  old = OpenImageFiles(mnt);
  Check(old[0] >= 0, "raw: image file open");
  Check(InlineCloseRange(3) == 0, "raw: close_range(3, ~0U)");
  long m = InlineMemfd("raw");
  Check(m >= 0 && write(static_cast<int>(m), "memfd", 5) == 5, "raw: memfd_create with the syscall instruction");
  void* map = mmap(nullptr, 5, PROT_READ, MAP_SHARED, static_cast<int>(m), 0);
  Check(map != MAP_FAILED && memcmp(map, "memfd", 5) == 0, "raw: mmap maps the new memfd, fd " + std::to_string(m));
  if (map != MAP_FAILED) munmap(map, 5);
  char buf[8] = {0};
  Check(pread(static_cast<int>(m), buf, 5, 0) == 5 && memcmp(buf, "memfd", 5) == 0,
        "raw: the memfd still holds its bytes");
  ImageStillReads("raw", src, mnt, "/raw/fresh3.bin");

  printf("%d failed\n", g_failed);
  return g_failed ? 1 : 0;
}
