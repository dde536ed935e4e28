// libFuzzer target: reading every file of a mutated image. Input: u32 index length, the index, then the
// partition file part-00000.fsp. The index's checksums are fixed up; the partition's header checksum too (so
// the damage reaches the file bytes). Every file is read whole, in pieces and through a kernel fd: each read
// must fail cleanly or return exactly the bytes whose chunk checksums held -- never crash, overrun or hang.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/client.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fanstore;
  if (size < 4) return 0;
  const uint32_t ilen = format::Load32(data);
  if (ilen > size - 4) return 0;
  std::string index(reinterpret_cast<const char*>(data) + 4, ilen);
  std::string part(reinterpret_cast<const char*>(data) + 4 + ilen, size - 4 - ilen);
  fuzz::FixIndexChecksums(index);
  if (part.size() >= format::kPartHeaderSize)
    format::Store64(part.data() + format::phdr::kHeaderXxh3, XXH3_64bits(part.data(), format::phdr::kHeaderXxh3));
  fuzz::WriteScratch(format::kIndexName, reinterpret_cast<const uint8_t*>(index.data()), index.size());
  fuzz::WriteScratch("part-00000.fsp", reinterpret_cast<const uint8_t*>(part.data()), part.size());
  ClientOptions o;
  o.image = fuzz::ScratchDir();
  o.cache_bytes = 1 << 20;
  auto client = Client::Create(o);
  if (!client.ok()) return 0;
  Client& c = **client;
  const uint64_t n = c.image().size() < 256 ? c.image().size() : 256;
  std::vector<char> buf;
  for (uint32_t id = 0; id < n; ++id) {
    Entry e = c.image().Get(id);
    if (!e.is_reg()) continue;
    (void)c.image().CheckFile(id);
    auto f = c.Open(id);
    if (!f.ok()) continue;
    const uint64_t want = e.size < (8u << 20) ? e.size : (8u << 20);
    buf.assign(want + 16, '\0');
    auto r = (*f)->ReadAt(0, buf.data(), want + 16);
    if (r.ok() && *r > want + 16) __builtin_trap();
    for (uint64_t off = 1; off < want; off = off * 3 + 7) {
      auto p = (*f)->ReadAt(off, buf.data(), 100);
      if (p.ok() && *p > 100) __builtin_trap();
    }
    if (e.size < (4u << 20)) {
      auto fd = (*f)->KernelFd(0);
      if (fd.ok()) {
        struct stat st;
        if (fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != e.size) __builtin_trap();
        close(*fd);
      }
    }
  }
  return 0;
}
