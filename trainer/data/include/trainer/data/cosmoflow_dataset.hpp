// CosmoFlow reader: HDF5 universes `full` (D,H,W,4) + `unitPar` (4,) -> NCDHW log(1+x) volumes + 4 targets.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/data/hdf5_volume.hpp"
#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

struct CosmoFlowOptions {
  // MLPerf's transform: x -> log(1 + x) (particle counts span orders of magnitude).
  bool apply_log = true;
  // The spatial box this rank reads; empty = the whole volume.
  std::optional<Slab> slab{};
  // MLPerf's HDF5 names; its prepare.py writes the split sub-volumes as "split".
  std::string volume_dataset = "full";
  std::string target_dataset = "unitPar";
};

// Samples are the sorted *.h5/*.hdf5 files of `directory`. The first file fixes the volume shape
// (D,H,W,C); every other file must match it. Output: input (C, slab D, slab H, slab W) float32,
// target (T,) float32 (T = 4 for MLPerf).
class CosmoFlowDataset : public SampleDataset {
 public:
  CosmoFlowDataset(std::string directory, CosmoFlowOptions options);

  // Shape of the whole stored volume, (D, H, W, C).
  const std::vector<std::uint64_t>& volume_dims() const { return volume_dims_; }
  const Slab& slab() const { return slab_; }

  std::size_t size() const override { return files_.size(); }
  const SampleLayout& layout() const override { return layout_; }
  std::string sample_path(std::size_t index) const override { return files_[index]; }
  void load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const override;

 private:
  CosmoFlowOptions options_;
  std::vector<std::string> files_;
  std::vector<std::uint64_t> volume_dims_;
  std::uint64_t target_count_ = 0;
  Slab slab_;
  SampleLayout layout_;
};

}  // namespace fanstore::trainer::data
