// Reads one epoch of a dataset through the data pipeline and prints a checksum of every batch byte,
// so the same program can be compared on a plain tree and under `fanstore run` (interposer test).
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "trainer/data/batch_loader.hpp"
#include "trainer/data/cosmoflow_dataset.hpp"
#include "trainer/data/image_folder.hpp"
#include "trainer/data/prefetcher.hpp"
#include "trainer/data/shard.hpp"
#include "trainer/data/unet3d_dataset.hpp"

namespace data = fanstore::trainer::data;

namespace {

// FNV-1a over raw bytes: any difference in any decoded value changes it.
void hash_bytes(std::uint64_t& hash, const void* bytes, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 0x100000001B3ull;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s imagefolder|cosmoflow|unet3d DIR\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[1], directory = argv[2];
  try {
    std::unique_ptr<data::SampleDataset> dataset;
    if (kind == "imagefolder") {
      dataset = std::make_unique<data::ImageFolderDataset>(directory, data::ImageFolderOptions{.output_size = 32});
    } else if (kind == "cosmoflow") {
      dataset = std::make_unique<data::CosmoFlowDataset>(directory,
                                                         data::CosmoFlowOptions{.slab = data::Slab{0, 4, 2, 8, 1, 7}});
    } else if (kind == "unet3d") {
      dataset = std::make_unique<data::Unet3dDataset>(directory, data::Unet3dOptions{});
    } else {
      std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
      return 2;
    }
    const data::BatchLoader loader(*dataset, {.seed = 5});
    const auto shard = data::shard_indices(
        {.dataset_size = dataset->size(), .batch_size = 4, .seed = 5, .epoch = 1, .last_batch = data::LastBatch::kPad});
    data::Prefetcher prefetcher(loader, data::split_into_batches(shard, 4), 1, {.threads = 2, .queue_depth = 3});
    std::uint64_t hash = 0xCBF29CE484222325ull, batches = 0;
    while (auto batch = prefetcher.next()) {
      ++batches;
      hash_bytes(hash, batch->input.data(), batch->input.size() * sizeof(float));
      hash_bytes(hash, batch->target_values.data(), batch->target_values.size() * sizeof(float));
      hash_bytes(hash, batch->target_labels.data(), batch->target_labels.size() * sizeof(std::int32_t));
    }
    std::printf("%s samples %zu batches %llu checksum %016llx\n", kind.c_str(), dataset->size(),
                static_cast<unsigned long long>(batches), static_cast<unsigned long long>(hash));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "data_reader_probe: %s\n", error.what());
    return 1;
  }
  return 0;
}
