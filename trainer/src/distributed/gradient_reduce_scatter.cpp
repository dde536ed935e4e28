// ZeRO stage 2: each parameter's gradient summed over the spatial group from the backward hook, this
// rank's part of it kept, its tensor released once the sums in flight are done.
#include <algorithm>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {
constexpr std::size_t kPieceFloats = GradientReduceScatter::kPieceBytes / sizeof(float);
}  // namespace

GradientReduceScatter::GradientReduceScatter(Communicator& group, Communicator* replicas, ParameterTable& table,
                                             std::vector<ArenaPart> parts)
    : group_(group),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      table_(table),
      parts_(std::move(parts)),
      started_(table.parameters().size(), false) {
  if (parts_.size() != static_cast<std::size_t>(group.size()))
    throw std::logic_error("GradientReduceScatter: one part per rank of the group");
  own_ = parts_[static_cast<std::size_t>(group.rank())];
  for (const auto& e : table.parameters())
    bound_bytes_ = std::max(bound_bytes_, static_cast<std::size_t>(e.shape.numel()) * sizeof(float));
  table_.keep_gradient_part(own_);
}

// A step abandoned by an exception must not leave MPI or NCCL reading the tensors in flight.
GradientReduceScatter::~GradientReduceScatter() { group_.wait_all(); }

void GradientReduceScatter::begin_step() {
  std::fill(started_.begin(), started_.end(), false);
  started_in_backward_ = 0;
  in_backward_ = true;
}

void GradientReduceScatter::on_layer_ready(const Layer& layer) {
  release(false);  // also lets MPI progress the sums in flight
  for (auto h : layer.parameter_handles()) start(h);
}

void GradientReduceScatter::release(bool wait) {
  if (in_flight_.empty()) return;
  if (wait) group_.wait_all();
  else if (!group_.poll()) return;
  // The own part of each finished sum into the kept gradients (on a GPU queued after the sums).
  Backend& b = table_.backend();
  const Device device = table_.device();
  for (const OwnPiece& p : own_pieces_)
    b.copy_bytes(table_.gradients() + p.offset, device, p.sum, device, p.count * sizeof(float));
  own_pieces_.clear();
  in_flight_.clear();
  in_flight_bytes_ = 0;
}

void GradientReduceScatter::start(ParameterHandle h) {
  if (started_.at(h.index)) return;
  started_[h.index] = true;
  const ParameterEntry& e = table_.parameters()[h.index];
  Tensor gradient = table_.take_gradient(h);
  // A layer that backward skipped (no gradient reached it) adds nothing; the group still sums in step.
  if (!gradient.defined()) gradient = table_.backend().zeros(e.shape);
  const std::size_t count = static_cast<std::size_t>(e.shape.numel());
  // At most bound_bytes_ of gradients in flight (MPI's nonblocking sums keep a copy each, and on a GPU
  // they queue behind the kernels): past it, wait for those in flight first (on a GPU, on the device).
  if (in_flight_bytes_ + count * sizeof(float) > bound_bytes_) release(true);
  float* data = in_flight_.emplace_back(std::move(gradient)).data();
  in_flight_bytes_ += count * sizeof(float);
  // MPI takes a tensor larger than its in-flight limit in waves.
  const std::size_t wave_floats = group_.sum_bytes_in_flight() / sizeof(float);
  std::size_t in_wave = 0;
  for (std::size_t done = 0; done < count; done += kPieceFloats) {
    const ArenaPart piece{e.offset + done, e.offset + std::min(count, done + kPieceFloats)};
    if (wave_floats > 0 && in_wave > 0 && in_wave + piece.size() > wave_floats) {
      group_.wait_all();  // the own parts are copied, the tensors released at the next release()
      in_wave = 0;
    }
    std::vector<std::size_t> counts;
    for (const ArenaPart& p : parts_) counts.push_back(piece.intersect(p).size());
    group_.start_sum_scatter(data + done, counts);
    in_wave += piece.size();
    if (const ArenaPart mine = piece.intersect(own_); mine.size() > 0)
      own_pieces_.push_back({data + (mine.begin - e.offset), mine.begin - own_.begin, mine.size()});
  }
  if (in_backward_) ++started_in_backward_;
}

void GradientReduceScatter::finish() {
  in_backward_ = false;
  for (std::size_t i = table_.parameters().size(); i-- > 0;) start({i});  // in backward's order, as the hook
  release(true);
  Tensor own = table_.arena(Arena::Gradients);
  if (!replicas_ || own.numel() == 0) return;
  replicas_->sum(own.data(), static_cast<std::size_t>(own.numel()));
  table_.backend().scale(own, 1.f / static_cast<float>(replicas_->size()));
}

std::unique_ptr<GradientReduction> make_gradient_reduction(Communicator& world, ProcessGrid* grid,
                                                           ParameterTable& table, const Optimizer& optimizer,
                                                           std::size_t bucket_bytes, std::size_t replicas) {
  if (grid && optimizer.sharded())
    return std::make_unique<GradientReduceScatter>(grid->spatial(), &grid->samples(), table, optimizer.parts());
  return std::make_unique<GradientAllreduce>(world, table, bucket_bytes, replicas);
}

}  // namespace fanstore::trainer
