// Helpers for the FUSE tests (see fuse_test_util.hpp).
#include "fuse_test_util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fanstore/image.hpp"
#include "fuse_preflight.hpp"

namespace fs = std::filesystem;

namespace fanstore::fusetest {

const char* CliPath() { return FANSTORE_CLI; }

std::string MakeTempDir(const char* tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fanstore-" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  return buf.data();
}

void RemoveTree(const std::string& dir) {
  // Never recurse into a mount (live or left stale by a crashed server): lazily unmount everything
  // below `dir` first, as listed by the kernel, since stat on a stale mount fails with ENOTCONN.
  char real[PATH_MAX];
  const std::string prefix = std::string(::realpath(dir.c_str(), real) ? real : dir.c_str()) + "/";
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::vector<std::string> mounts;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mnt;
    if ((fields >> id >> parent >> devno >> root >> mnt) && mnt.rfind(prefix, 0) == 0) mounts.push_back(mnt);
  }
  for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) RunCommand({"/usr/bin/fusermount3", "-u", "-z", *it});
  std::error_code ec;
  fs::remove_all(dir, ec);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, std::min<size_t>(8, n - i));
  }
  return s;
}

void MakeSourceTree(const std::string& root) {
  WriteFile(root + "/hello.txt", "hello, fanstore\n");
  WriteFile(root + "/empty.bin", "");
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "line " + std::to_string(i) + " of a compressible text file\n";
  WriteFile(root + "/docs/text.txt", text);
  WriteFile(root + "/train/cat/0001.jpg", RandomBytes(3 * 1024 * 1024 + 17, 1));  // > 1 MiB: several reads
  WriteFile(root + "/train/cat/0002.jpg", RandomBytes(4096, 2));
  WriteFile(root + "/train/dog/0001.jpg", RandomBytes(123457, 3));
  for (int i = 0; i < 300; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/many/f%04d.dat", i);
    WriteFile(root + name, RandomBytes(static_cast<size_t>(100 + i * 37), 100 + i));
  }
  WriteFile(root + "/bad.bin", RandomBytes(65536, 7));
  fs::create_directories(root + "/emptydir");
  fs::create_directories(root + "/deep/a/b/c/d");
  WriteFile(root + "/deep/a/b/c/d/leaf.txt", "leaf\n");
}

namespace {
[[noreturn]] void ExecOrDie(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}
}  // namespace

RunResult RunCommand(const std::vector<std::string>& argv) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ExecOrDie(argv);
  }
  ::close(p[1]);
  RunResult r;
  char buf[4096];
  ssize_t n;
  // A detached mount server redirects its stdio to /dev/null, so EOF comes when the CLI exits.
  while ((n = ::read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) r.output.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ExecOrDie(argv);
  }
  return pid;
}

bool IsMounted(const std::string& path) {
  char real[PATH_MAX];
  return mount::IsMountPoint(::realpath(path.c_str(), real) ? real : path);
}

bool WaitMounted(const std::string& path, bool want, double seconds, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (IsMounted(path) == want) return true;
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == pid) return IsMounted(path) == want;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void CorruptStoredFile(const std::string& image, const std::string& rel) {
  auto img = Image::Open(image);
  if (!img.ok()) throw std::runtime_error("open image: " + img.status().ToString());
  auto id = (*img)->Lookup(rel);
  if (!id.ok()) throw std::runtime_error("lookup " + rel + ": " + id.status().ToString());
  const Entry e = (*img)->Get(*id);
  const std::string part = (*img)->PartitionPath(e.part);
  const int fd = ::open(part.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("open " + part);
  const off_t at = static_cast<off_t>(e.offset + e.stored_size / 2);
  unsigned char c = 0;
  if (::pread(fd, &c, 1, at) != 1) throw std::runtime_error("pread " + part);
  c ^= 0x5a;
  if (::pwrite(fd, &c, 1, at) != 1) throw std::runtime_error("pwrite " + part);
  ::close(fd);
}

}  // namespace fanstore::fusetest
