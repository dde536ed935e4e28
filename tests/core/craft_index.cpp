// Test helper: sets one field of one entry of an image's index and recomputes both checksums, producing a
// "valid" crafted index. Usage: craft_index IMAGE PATH offset|size|stored_size VALUE
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fanstore/image.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "test_util.hpp"

int main(int argc, char** argv) {
  using namespace fanstore::format;
  if (argc != 5) {
    std::fprintf(stderr, "usage: craft_index IMAGE PATH offset|size|stored_size VALUE\n");
    return 2;
  }
  const std::string dir = argv[1], field = argv[3];
  auto img = fanstore::Image::Open(dir);
  if (!img.ok()) {
    std::fprintf(stderr, "craft_index: %s\n", img.status().ToString().c_str());
    return 1;
  }
  auto id = (*img)->Lookup(argv[2]);
  if (!id.ok()) return 1;
  size_t off = field == "offset"        ? ent::kOffset
               : field == "size"        ? ent::kSize
               : field == "stored_size" ? ent::kStoredSize
                                        : 0;
  if (off == 0) return 2;
  std::string b = fanstore::test::ReadAll(dir + "/index.fsi");
  Store64(b.data() + Load64(b.data() + hdr::kEntriesOff) + uint64_t{*id} * kEntrySize + off,
          std::strtoull(argv[4], nullptr, 0));
  Store64(b.data() + hdr::kBodyXxh3, XXH3_64bits(b.data() + kHeaderSize, b.size() - kHeaderSize));
  Store64(b.data() + hdr::kHeaderXxh3, XXH3_64bits(b.data(), hdr::kHeaderXxh3));
  fanstore::test::Overwrite(dir + "/index.fsi", b);
  return 0;
}
