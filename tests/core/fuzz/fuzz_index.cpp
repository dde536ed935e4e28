// libFuzzer target: the index parser. Every input is written as index.fsi and opened; most get their checksums
// fixed up first (so mutations reach the structural checks), a few do not (the checksum paths). An accepted index
// is then used the way a front end does: every entry, lookup, listing, symlink target and chunk record.
#include <cstdint>
#include <string>

#include "fanstore/image.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fanstore;
  std::string b(reinterpret_cast<const char*>(data), size);
  if (size > 0 && data[size - 1] % 8 != 0) fuzz::FixIndexChecksums(b);
  fuzz::WriteScratch(format::kIndexName, reinterpret_cast<const uint8_t*>(b.data()), b.size());
  auto img = Image::Open(fuzz::ScratchDir());
  if (!img.ok()) return 0;
  const Image& m = **img;
  (void)m.Summary();
  const uint64_t n = m.size() < 4096 ? m.size() + 2 : 4096;
  for (uint32_t id = 0; id < n; ++id) {
    Entry e = m.Get(id);
    auto found = m.Lookup(e.path);
    if (found.ok() && *found >= m.size()) __builtin_trap();  // a lookup must name a real entry
    for (uint32_t i = 0, c = m.ChildCount(id); i < c && i < 64; ++i) {
      uint32_t child = m.Child(id, i);
      if (child >= m.size()) __builtin_trap();
      (void)m.Get(child).name;
    }
    if (e.is_link()) {  // a target inside the string table, never a NUL in it
      auto t = m.LinkTarget(e);
      if (t.ok() && (t->empty() || t->find('\0') != std::string_view::npos)) __builtin_trap();
      continue;
    }
    if (!e.is_reg()) continue;
    const uint64_t chunks = m.ChunkCount(e);
    for (uint64_t i = 0; i < chunks && i < 16; ++i) {
      auto c = m.GetChunk(e, i);
      if (!c.ok()) continue;
      // What GetChunk accepts must be within the limits every reader relies on.
      if (c->raw_size > m.ChunkSize() || c->raw_offset + c->raw_size > e.size || c->offset < e.offset ||
          c->offset - e.offset + c->stored_size > e.stored_size)
        __builtin_trap();
    }
  }
  return 0;
}
