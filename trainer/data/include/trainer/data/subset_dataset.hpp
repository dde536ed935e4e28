// A view of some samples of another dataset: sample i is the base's sample indices[i] (a tournament
// trainer's shard, or its tournament set).
#pragma once

#include <memory>
#include <vector>

#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

class SubsetDataset final : public SampleDataset {
 public:
  SubsetDataset(std::shared_ptr<const SampleDataset> base, std::vector<std::size_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}

  std::size_t size() const override { return indices_.size(); }
  const SampleLayout& layout() const override { return base_->layout(); }
  std::string sample_path(std::size_t index) const override { return base_->sample_path(indices_.at(index)); }
  void load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const override {
    base_->load_sample(indices_.at(index), augment_seed, out);
  }

 private:
  std::shared_ptr<const SampleDataset> base_;
  std::vector<std::size_t> indices_;
};

}  // namespace fanstore::trainer::data
