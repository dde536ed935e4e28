// Bench helper: writes an image with N empty files (dirs of 1000) straight from a synthetic tree, so the index of
// a 10M-file image can be measured without making 10M source files. Usage: synth_index N IMAGE_DIR
#include <sys/stat.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fanstore/protocol/image_format.hpp"
#include "pack_tree.hpp"
#include "write_env.hpp"

using namespace fanstore;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: synth_index N IMAGE_DIR\n");
    return 2;
  }
  const uint64_t n = std::strtoull(argv[1], nullptr, 10);
  const std::string out = argv[2];
  const uint64_t per_dir = 1000, dirs = (n + per_dir - 1) / per_dir;
  PackTree t;
  t.nodes.reserve(1 + dirs + n);
  auto add = [&](const std::string& path, uint32_t name_off, uint32_t parent, bool dir) {
    PackNode x;
    x.path_off = t.paths.size();
    x.path_len = static_cast<uint32_t>(path.size());
    x.name_off = name_off;
    t.paths += path;
    x.parent = parent;
    x.mode = dir ? (S_IFDIR | 0755) : (S_IFREG | 0644);
    x.mtime_sec = 1700000000;
    x.nlink = dir ? 2 : 1;
    if (!dir) {
      x.part = 0;
      x.offset = format::kPartHeaderSize;
      x.checksum = XXH3_64bits("", 0);
    }
    t.nodes.push_back(x);
    return static_cast<uint32_t>(t.nodes.size() - 1);
  };
  add("", 0, 0, true);
  t.dirs = 1;
  char name[32];
  // Pre-order with sorted siblings: each directory's files follow it; listings are contiguous id runs.
  std::vector<uint32_t> dir_ids;
  for (uint64_t d = 0; d < dirs; ++d) {
    std::snprintf(name, sizeof name, "d%07llu", static_cast<unsigned long long>(d));
    const std::string dp = name;
    const uint32_t did = add(dp, 0, 0, true);
    dir_ids.push_back(did);
    ++t.dirs;
    t.nodes[did].child_first = static_cast<uint32_t>(-1);
    for (uint64_t f = d * per_dir; f < std::min(n, (d + 1) * per_dir); ++f) {
      std::snprintf(name, sizeof name, "/f%07llu", static_cast<unsigned long long>(f));
      add(dp + name, static_cast<uint32_t>(dp.size() + 1), did, false);
      ++t.files;
    }
  }
  t.nodes[0].nlink = static_cast<uint32_t>(2 + dirs);
  t.nodes[0].child_first = 0;
  t.nodes[0].child_count = static_cast<uint32_t>(dirs);
  for (uint32_t did : dir_ids) t.children.push_back(did);
  for (uint32_t did : dir_ids) {
    t.nodes[did].child_first = static_cast<uint32_t>(t.children.size());
    uint32_t count = 0;
    for (uint32_t id = did + 1;
         id < t.nodes.size() && t.nodes[id].parent == did && (t.nodes[id].mode & S_IFMT) == S_IFREG; ++id, ++count)
      t.children.push_back(id);
    t.nodes[did].child_count = count;
  }
  IndexMeta meta;
  meta.regular_parts = 1;
  meta.parts.push_back({format::PartitionFileName(0, 1), 0, t.files});
  const uint64_t image_id = ComputeImageId(t, meta);
  WriteEnv* env = DefaultWriteEnv();
  if (!env->CreateDir(out).ok()) return 1;
  std::string h(format::kPartHeaderSize, '\0');
  std::memcpy(h.data(), format::kPartMagic, 8);
  format::Store32(h.data() + format::phdr::kVersion, format::kVersion);
  format::Store32(h.data() + format::phdr::kHeaderSize, format::kPartHeaderSize);
  format::Store64(h.data() + format::phdr::kImageId, image_id);
  format::Store64(h.data() + format::phdr::kHeaderXxh3, XXH3_64bits(h.data(), format::phdr::kHeaderXxh3));
  auto part = env->NewWritableFile(out + "/" + meta.parts[0].file_name);
  auto idx = env->NewWritableFile(out + "/" + format::kIndexName);
  if (!part.ok() || !idx.ok() || !(*part)->Append(h.data(), h.size()).ok() || !(*part)->Close().ok()) return 1;
  Status s = WriteIndex(t, meta, image_id, idx->get());
  if (s.ok()) s = (*idx)->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "synth_index: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("synth_index: %llu files in %llu directories -> %s\n", static_cast<unsigned long long>(t.files),
              static_cast<unsigned long long>(dirs), out.c_str());
  return 0;
}
