// Helpers shared by the core tests: a self-removing temp dir, file writers, whole-file reads, byte flips.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"

namespace fanstore::test {

// mkdtemp under $TMPDIR (or /tmp); removed recursively with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fanstore-test-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~TempDir() { RemoveAll(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

  static void RemoveAll(const std::string& p) {
    struct stat st;
    if (p.empty() || ::lstat(p.c_str(), &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
      ::chmod(p.c_str(), 0755);  // tests make unreadable dirs
      if (DIR* d = ::opendir(p.c_str())) {
        std::vector<std::string> names;
        while (dirent* e = ::readdir(d)) {
          std::string n = e->d_name;
          if (n != "." && n != "..") names.push_back(n);
        }
        ::closedir(d);
        for (const auto& n : names) RemoveAll(p + "/" + n);
      }
      ::rmdir(p.c_str());
    } else {
      ::unlink(p.c_str());
    }
  }

 private:
  std::string path_;
};

inline void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
}

inline void WriteFile(const std::string& path, const std::string& data) {
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) MakeDirs(path.substr(0, slash));
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Rewrites `path` in place (pwrite + ftruncate): much cheaper than truncate-and-recreate on ext4 with discard,
// which matters for loops that write thousands of mutated indexes.
inline void Overwrite(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::pwrite(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) {
  }
  if (::ftruncate(fd, static_cast<off_t>(data.size())) != 0) {
  }
  ::close(fd);
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

inline std::string TextBytes(size_t n, uint32_t seed) {  // compressible
  std::mt19937 rng(seed);
  static const char* kWords[] = {"cat ", "dog ", "tensor ", "epoch ", "batch\n", "image "};
  std::string s;
  while (s.size() < n) s += kWords[rng() % 6];
  s.resize(n);
  return s;
}

inline Result<PackReport> PackTree(const std::string& src, const std::string& out, uint32_t parts = 1,
                                   std::vector<std::string> replicate = {}, int threads = 2,
                                   std::vector<std::string>* warnings = nullptr, uint32_t chunk_size = 1u << 20,
                                   int level = 3) {
  PackOptions o;
  o.source = src;
  o.output = out;
  o.parts = parts;
  o.replicate = std::move(replicate);
  o.threads = threads;
  o.chunk_size = chunk_size;
  o.level = level;
  return Pack(o, {}, [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  });
}

inline std::shared_ptr<const Image> OpenOrDie(const std::string& dir) {
  auto r = Image::Open(dir);
  if (!r.ok()) return nullptr;
  return *r;
}

// Decodes file `rel` of `img` into a string ("<error: ...>" when it fails).
inline std::string ReadImageFile(const Image& img, const std::string& rel) {
  auto id = img.Lookup(rel);
  if (!id.ok()) return "<error: " + id.status().ToString() + ">";
  std::string out(img.Get(*id).size, '\0');
  Status s = img.ReadFile(*id, out.data());
  if (!s.ok()) return "<error: " + s.ToString() + ">";
  return out;
}

// Bytes [offset, offset + length) of partition `part`'s file, as a daemon serving it would read them (for fake
// remote fetchers).
inline Status ReadPartitionRange(const Image& img, uint32_t part, uint64_t offset, uint64_t length, std::string* out) {
  out->assign(length, '\0');
  int fd = ::open(img.PartitionPath(part).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open partition");
  ssize_t n = ::pread(fd, out->data(), out->size(), static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(length)) return Status(Code::kIoError, "short partition read");
  return Status::Ok();
}

// XORs `mask` into the byte at `offset` of `path`, in place (as bit rot or an in-place copy would).
inline bool FlipByte(const std::string& path, uint64_t offset, unsigned char mask = 0x10) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char c = 0;
  bool ok = ::pread(fd, &c, 1, static_cast<off_t>(offset)) == 1;
  c ^= mask;
  ok = ok && ::pwrite(fd, &c, 1, static_cast<off_t>(offset)) == 1;
  ::close(fd);
  return ok;
}

}  // namespace fanstore::test
