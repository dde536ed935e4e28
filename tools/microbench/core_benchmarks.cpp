// The core's hot paths through the public API only (fanstore/image.hpp, client.hpp), so they keep measuring the same
// thing while the decode internals change: path lookup, stat data, decode + checksum of stored files, the cache.
#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "benchmarks.hpp"
#include "fanstore/client.hpp"
#include "fanstore/image.hpp"

namespace fanstore::microbench {
namespace {

struct Core {
  std::shared_ptr<const Image> image;
  std::unique_ptr<Client> cached;    // the default decoded-file cache, as a front end has it
  std::unique_ptr<Client> uncached;  // cache budget 0: every Load decodes
  std::vector<std::string> lookup_paths;
  std::vector<uint32_t> small_ids, mid_ids, raw_ids;
  uint32_t big_id = 0;
};

std::vector<uint32_t> Ids(const Image& img, const std::vector<std::string>& paths) {
  std::vector<uint32_t> ids;
  for (const auto& p : paths) ids.push_back(*img.Lookup(p));
  return ids;
}

// Image::ReadFile over `ids` in turn: pread of the stored bytes, zstd decode (or none when raw), XXH3 check.
void ReadFiles(benchmark::State& s, const Image& img, const std::vector<uint32_t>& ids, uint64_t bytes) {
  std::vector<char> out(bytes);
  size_t i = 0;
  for (auto _ : s) {
    Status st = img.ReadFile(ids[i++ % ids.size()], out.data());
    if (!st.ok()) {
      s.SkipWithError(st.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * bytes));
}

void Load(benchmark::State& s, Client& c, const std::vector<uint32_t>& ids, uint64_t bytes) {
  size_t i = 0;
  for (auto _ : s) {
    auto b = c.Load(ids[i++ % ids.size()]);
    if (!b.ok()) {
      s.SkipWithError(b.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize((*b)->data());
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * bytes));
}

}  // namespace

bool RegisterCoreBenchmarks(const Fixture& f, std::string* error) {
  auto core = std::make_shared<Core>();
  auto img = Image::Open(f.image);
  if (!img.ok()) {
    *error = img.status().ToString();
    return false;
  }
  core->image = *img;
  ClientOptions o;
  o.image = f.image;
  auto cached = Client::Create(o);
  o.cache_bytes = 0;
  auto uncached = Client::Create(o);
  if (!cached.ok() || !uncached.ok()) {
    *error = (cached.ok() ? uncached.status() : cached.status()).ToString();
    return false;
  }
  core->cached = std::move(cached).value();
  core->uncached = std::move(uncached).value();
  core->lookup_paths = f.small;
  core->small_ids = Ids(*core->image, f.small);
  core->mid_ids = Ids(*core->image, f.mid);
  core->raw_ids = Ids(*core->image, f.raw);
  core->big_id = *core->image->Lookup(f.big);
  for (uint32_t id : core->mid_ids)
    if (core->image->Get(id).codec != Codec::kZstd) {
      *error = "the 128 KiB text files were not stored compressed: the decode benchmarks would measure nothing";
      return false;
    }

  benchmark::RegisterBenchmark("core/Image::Lookup", [core](benchmark::State& s) {
    size_t i = 0;
    for (auto _ : s) benchmark::DoNotOptimize(core->image->Lookup(core->lookup_paths[i++ % core->lookup_paths.size()]));
  });
  benchmark::RegisterBenchmark("core/Client::Lookup+FillStat", [core](benchmark::State& s) {
    size_t i = 0;
    struct stat st;
    for (auto _ : s) {
      auto id = core->cached->Lookup(core->lookup_paths[i++ % core->lookup_paths.size()]);
      core->cached->FillStat(*id, &st);
      benchmark::DoNotOptimize(st);
    }
  });
  benchmark::RegisterBenchmark("core/Image::ReadFile zstd 4KiB", [core](benchmark::State& s) {
    ReadFiles(s, *core->image, core->small_ids, kSmallBytes);
  });
  benchmark::RegisterBenchmark("core/Image::ReadFile zstd 128KiB",
                               [core](benchmark::State& s) { ReadFiles(s, *core->image, core->mid_ids, kMidBytes); });
  benchmark::RegisterBenchmark("core/Image::ReadFile zstd 4MiB",
                               [core](benchmark::State& s) { ReadFiles(s, *core->image, {core->big_id}, kBigBytes); });
  // Raw files: no decode, so this is the read + checksum path.
  benchmark::RegisterBenchmark("core/Image::ReadFile raw 128KiB",
                               [core](benchmark::State& s) { ReadFiles(s, *core->image, core->raw_ids, kMidBytes); });
  benchmark::RegisterBenchmark("core/Client::Load uncached zstd 128KiB",
                               [core](benchmark::State& s) { Load(s, *core->uncached, core->mid_ids, kMidBytes); });
  benchmark::RegisterBenchmark("core/Client::Load cached zstd 128KiB",
                               [core](benchmark::State& s) { Load(s, *core->cached, core->mid_ids, kMidBytes); });
  // The checksum alone, next to the memory bandwidth it competes with.
  benchmark::RegisterBenchmark("core/XXH3 128KiB", [](benchmark::State& s) {
    std::vector<char> buf(kMidBytes, 'x');
    for (auto _ : s) benchmark::DoNotOptimize(XXH3_64bits(buf.data(), buf.size()));
    s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * kMidBytes));
  });
  benchmark::RegisterBenchmark("core/memcpy 128KiB", [](benchmark::State& s) {
    std::vector<char> from(kMidBytes, 'x'), to(kMidBytes);
    for (auto _ : s) {
      std::memcpy(to.data(), from.data(), kMidBytes);
      benchmark::DoNotOptimize(to.data());
      benchmark::ClobberMemory();
    }
    s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * kMidBytes));
  });
  return true;
}

}  // namespace fanstore::microbench
