// Generates fanstore-microbench's tree with fixed seeds and packs it through the public fanstore::Pack API.
#include "fixture.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "fanstore/pack.hpp"

namespace fanstore::microbench {
namespace {

constexpr int kSmallFiles = 2000, kMidFiles = 64, kRawFiles = 64;

std::string Name(const char* fmt, int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, i % 10, i);
  return buf;
}

// Words from a small vocabulary: compresses about 3:1 with zstd -3, like text, CSV or JSON metadata.
std::string Text(uint64_t bytes, uint64_t seed) {
  static const char* kWords[] = {"tensor", "image", "label",  "epoch",  "batch",    "sample", "cluster", "node",
                                 "rank",   "shard", "lustre", "stripe", "fanstore", "decode", "zstd",    "cache"};
  std::mt19937_64 rng(seed);  // the engine's output is fixed by the standard; no distribution is used
  std::string s;
  s.reserve(bytes + 16);
  while (s.size() < bytes) {
    uint64_t r = rng();
    s += kWords[r % 16];
    s += (r >> 8) % 9 == 0 ? '\n' : ' ';
    if ((r >> 16) % 5 == 0) s += std::to_string((r >> 24) % 100000);
  }
  s.resize(bytes);
  return s;
}

std::string Random(uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(bytes, '\0');
  for (uint64_t i = 0; i < bytes; i += 8) {
    uint64_t r = rng();
    std::memcpy(s.data() + i, &r, std::min<uint64_t>(8, bytes - i));
  }
  return s;
}

Status Write(const std::string& path, const std::string& bytes) {
  for (size_t i = 1; i < path.size(); ++i)
    if (path[i] == '/' && ::mkdir(path.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST)
      return Status(Code::kIoError, "mkdir " + path.substr(0, i) + ": " + std::strerror(errno));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status(Code::kIoError, "create " + path + ": " + std::strerror(errno));
  bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok ? Status::Ok() : Status(Code::kIoError, "write " + path + ": short write");
}

}  // namespace

Fixture DescribeFixture(const std::string& dir) {
  Fixture f;
  f.dir = dir;
  f.src = dir + "/src";
  f.image = dir + "/image";
  for (int i = 0; i < kSmallFiles; ++i) f.small.push_back(Name("small/d%02d/f%05d.txt", i));
  for (int i = 0; i < kMidFiles; ++i) f.mid.push_back(Name("mid/d%d/m%03d.txt", i));
  for (int i = 0; i < kRawFiles; ++i) f.raw.push_back(Name("raw/d%d/r%03d.bin", i));
  f.big = "big.txt";
  return f;
}

Status MakeFixture(const Fixture& f) {
  uint64_t seed = 1;
  for (const auto& p : f.small)
    if (Status s = Write(f.src + "/" + p, Text(kSmallBytes, seed++)); !s.ok()) return s;
  for (const auto& p : f.mid)
    if (Status s = Write(f.src + "/" + p, Text(kMidBytes, seed++)); !s.ok()) return s;
  for (const auto& p : f.raw)
    if (Status s = Write(f.src + "/" + p, Random(kMidBytes, seed++)); !s.ok()) return s;
  if (Status s = Write(f.src + "/" + f.big, Text(kBigBytes, seed++)); !s.ok()) return s;
  PackOptions o;
  o.source = f.src;
  o.output = f.image;
  o.parts = 2;
  o.threads = 2;
  auto r = Pack(o);
  return r.ok() ? Status::Ok() : r.status();
}

}  // namespace fanstore::microbench
