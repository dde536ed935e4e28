// The grid-choosing performance model: measured layer times per slab shape, alpha-beta communication,
// overlap, memory per rank; and the --explain table.
#include "trainer/distributed_perf_model.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/distributed_plan.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr double kFloat = sizeof(float), kDouble = sizeof(double);
constexpr double kBucketBytes = 25.0 * (1 << 20);  // GradientAllreduce's default bucket

Tensor random_plain(const Shape& shape, std::uint32_t seed) {
  Tensor t = Tensor::zeros(shape);
  std::uint32_t s = seed * 2654435761u + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t[i] = static_cast<float>(static_cast<int>(s >> 9) % 2001 - 1000) * 1e-3f;
  }
  return t;
}

Shape with_batch(Shape s, std::int64_t n) {
  s[0] = n;
  return s;
}

// The local output of a node on the rank at `coords` with n samples per group.
Shape local_output(const Model& model, const SpatialPlan& plan, NodeId id, const std::vector<int>& coords,
                   std::int64_t n) {
  const NodePlacement& p = plan.node(id);
  const Shape global = model.shape(id);
  if (p.placement == Placement::kReplicated) return with_batch(global, n);
  const SpatialBox own = p.partition.owned(coords);
  if (p.placement == Placement::kSplitFlat) {
    const Shape in = model.shape(model.node_inputs(id).at(0));
    return Shape{n, in[1] * own.volume()};
  }
  Shape s{n, global[1]};
  for (auto e : own.extents()) s.dims.push_back(e);
  return s;
}

// Input shapes to time a node on: its inputs' local shapes, except that a windowed layer gets the
// input size whose serial output is exactly this rank's output slab (what the split layer computes).
std::vector<Shape> timing_inputs(const Model& model, const SpatialPlan& plan, NodeId id, const std::vector<int>& coords,
                                 std::int64_t n) {
  const auto& inputs = model.node_inputs(id);
  const NodePlacement& p = plan.node(id);
  std::vector<Shape> shapes;
  if (p.window && p.placement == Placement::kSplit) {
    const Shape out = local_output(model, plan, id, coords, n);
    Shape in{n, model.shape(inputs[0])[1]};
    for (std::size_t a = 0; a < p.window->size(); ++a) {
      const AxisWindow& w = (*p.window)[a];
      const std::int64_t o = out[static_cast<int>(a) + 2];
      const std::int64_t extent = w.transposed ? (o - w.extent + 2 * w.padding + w.stride - 1) / w.stride + 1
                                               : (o - 1) * w.stride + w.extent - 2 * w.padding;
      in.dims.push_back(std::max<std::int64_t>(1, extent));
    }
    return {in};
  }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const NodeId in = inputs[k];
    // A Linear cannot run on a narrower feature vector: time it on the whole one (an upper bound).
    if (plan.node(in).placement == Placement::kSplitFlat) {
      shapes.push_back(with_batch(model.shape(in), n));
    } else if (plan.redistributes(id, k)) {  // the input as the layer reads it
      Shape s{n, model.shape(in)[1]};
      for (auto e : p.inputs[k].owned(coords).extents()) s.dims.push_back(e);
      shapes.push_back(s);
    } else {
      shapes.push_back(local_output(model, plan, in, coords, n));
    }
  }
  return shapes;
}

double bytes_of(const Shape& s) { return static_cast<double>(s.numel()) * kFloat; }

// The most activation bytes alive at once in a training step, from what each layer keeps (Layer::saves).
// Forward: the kept tensors so far, the outputs still to be read, and the new output. Backward: the kept
// tensors of the layers not yet done, the gradients waiting for their node's backward (several consumers
// sum into one; an Add hands its dy to every input, alive until the last of them is done), and the new dx
// (none for an activation, which writes it over dy). A kept output goes with the backward of its earliest
// keeper (the last to run); the model's output stays to the end. out: each node's local output bytes (the
// input batch, node 0, is counted apart); copies: the haloed input a split convolution keeps instead of
// its producer's output; forward_scratch, backward_scratch: what the node's kernels hold for a moment besides
// (LayerCost).
double activation_peak_bytes(const Model& model, const std::vector<double>& out, const std::vector<double>& copies,
                             const std::vector<double>& forward_scratch, const std::vector<double>& backward_scratch) {
  const NodeId nodes = model.node_count(), output = model.output_node();
  std::vector<NodeId> freed_by(nodes, nodes);  // `nodes`: no layer keeps it
  for (NodeId id = 1; id < nodes; ++id) {
    const Layer::Saves saves = model.node_layer(id)->saves();
    const NodeId producer = model.node_inputs(id).at(0);
    if (saves == Layer::Saves::kOutput) freed_by[id] = std::min(freed_by[id], id);
    if (saves == Layer::Saves::kInput && copies[id] == 0 && producer != 0)
      freed_by[producer] = std::min(freed_by[producer], id);
  }
  std::vector<double> frees(nodes, 0.0);
  // Outputs no layer keeps, alive until their last reader has run (`read_by`: bytes that go there).
  std::vector<double> read_by(nodes, 0.0);
  double peak = 0, kept = 0, unread = 0;
  for (NodeId id = 1; id < nodes; ++id) {
    kept += copies[id];
    frees[id] += copies[id];
    peak = std::max(peak, kept + unread + out[id] + forward_scratch[id]);
    unread -= read_by[id];
    if (freed_by[id] < nodes || id == output) kept += out[id];
    if (freed_by[id] < nodes && id != output) frees[freed_by[id]] += out[id];
    if (freed_by[id] == nodes && id != output && model.last_readers()[id] > id) {
      unread += out[id];
      read_by[model.last_readers()[id]] += out[id];
    }
  }
  std::vector<double> waiting(nodes, 0.0);  // gradient bytes held for each node until its backward
  waiting[output] = out[output];
  double held = out[output];
  for (NodeId id = nodes - 1; id >= 1; --id) {
    const Layer& layer = *model.node_layer(id);
    const auto& inputs = model.node_inputs(id);
    const bool passes_dy = dynamic_cast<const Add*>(&layer) != nullptr;
    double dx = 0;
    if (layer.saves() != Layer::Saves::kOutput && !passes_dy)
      for (NodeId in : inputs) dx += in == 0 ? 0.0 : out[in];  // none for the model input in training
    peak = std::max(peak, kept + held + dx + backward_scratch[id]);
    held -= waiting[id];
    waiting[id] = 0;
    // Where each input's gradient waits: an Add's one shared dy at its earliest input.
    const NodeId earliest = *std::min_element(inputs.begin(), inputs.end());
    for (NodeId in : inputs) {
      if (in == 0 || (passes_dy && in != earliest)) continue;
      if (waiting[in] > 0) {
        peak = std::max(peak, kept + held + out[in]);  // the sum of two, before both parts go
      } else {
        waiting[in] = out[in];
        held += out[in];
      }
    }
    kept -= frees[id];
  }
  return peak;
}

// The layers the run gives a SplitWindowed op (distributed_model.cpp): windowed, on a split input.
bool split_windowed(const Model& model, const SpatialPlan& plan, NodeId id) {
  return plan.node(id).window && plan.node(model.node_inputs(id).at(0)).placement == Placement::kSplit;
}

// The halo plan of a split windowed node on the rank at `coords`.
HaloPlan node_halo(const SpatialPlan& plan, NodeId id, const std::vector<int>& coords) {
  const NodePlacement& node = plan.node(id);
  return make_halo_plan(*node.window, node.inputs.at(0), node.partition, coords);
}

// The pieces the run cuts a split windowed node into on the rank at `coords` with halo plan `halo`
// (split_windowed.cpp): one when it does not overlap its halo.
std::vector<WindowPiece> run_pieces(Model& model, const SpatialPlan& plan, NodeId id, const HaloPlan& halo,
                                    const std::vector<int>& coords, bool overlap) {
  const NodePlacement& node = plan.node(id);
  const Layer& layer = *model.node_layer(id);
  std::int64_t channels = 1, weights = 0;  // pooling: always worth cutting
  if (const auto* conv = dynamic_cast<const Convolution*>(&layer)) {
    channels = conv->spec().in_channels;
    weights = model.parameters().parameters().at(conv->parameter_handles()[0].index).shape.numel();
  }
  const bool exchanges = halo.exchanges() && !plan.reads_loaded_input(id);
  const SpatialBox out = node.partition.owned(coords);
  return window_pieces(*node.window, out, halo.owned, node.inputs.at(0).whole(),
                       overlaps_in_pieces(overlap, exchanges, halo.owned.volume() * channels, weights));
}

// One way of a halo exchange: the busiest direction's messages and bytes (`unit` bytes per position).
double halo_transfer_s(const HaloPlan& halo, double unit, const MachineCosts& costs) {
  const double bytes = static_cast<double>(std::max(halo.halo_volume(), halo.send_volume())) * unit;
  const double messages = static_cast<double>(std::max(halo.receive.size(), halo.send.size()));
  return messages * costs.latency_s + bytes / costs.bandwidth_bytes_s;
}

}  // namespace

double MachineCosts::allreduce(int ranks, double bytes) const {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return 2 * (p - 1) * latency_s + 2 * (p - 1) / p * bytes / bandwidth_bytes_s + (p - 1) / p * bytes / copy_bytes_s;
}

double MachineCosts::allgather(int ranks, double bytes) const {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return (p - 1) * latency_s + (p - 1) / p * bytes / bandwidth_bytes_s;
}

double fit_bandwidth(double small_s, double large_s, double bytes) {
  // At least half the large message's time goes to its bytes: under load the two come out alike and their
  // difference alone read petabytes per second. Continuous, and slower for a slower large message.
  return bytes / std::max({large_s - small_s, large_s / 2, 1e-9});
}

MachineCosts measure_machine_costs(Communicator& world) {
  MachineCosts c;
  // Local copy bandwidth: 32 MiB, best of 3.
  {
    std::vector<float> a(8 << 20, 1.f), b(8 << 20);
    double best = 1e9;
    for (int i = 0; i < 3; ++i) {
      const auto t = Clock::now();
      std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
      best = std::min(best, since(t));
    }
    c.copy_bytes_s = static_cast<double>(a.size() * sizeof(float)) / std::max(best, 1e-9);
  }
  if (world.size() > 1) {
    // Ping-pong between ranks 0 and 1; the others only wait for the result.
    auto ping_pong = [&](std::size_t floats, int rounds) {
      std::vector<float> buffer(floats, 0.f);
      double best = 1e9;
      for (int r = 0; r < rounds; ++r) {
        const auto t = Clock::now();
        if (world.rank() <= 1) {
          auto m = world.start_messages();
          if (world.rank() == 0) {
            m->send(1, buffer.data(), floats, 9001);
            m->wait();
            m->receive(1, buffer.data(), floats, 9002);
          } else {
            m->receive(0, buffer.data(), floats, 9001);
            m->wait();
            m->send(0, buffer.data(), floats, 9002);
          }
          m->wait();
        }
        best = std::min(best, since(t) / 2);
      }
      return best;
    };
    ping_pong(2, 3);  // warm-up: connection set-up
    const double small = ping_pong(2, 20);
    const double large = ping_pong(1 << 20, 5);
    c.latency_s = small;
    c.bandwidth_bytes_s = fit_bandwidth(small, large, static_cast<double>((1 << 20) * sizeof(float)));
  }
  double figures[3] = {c.latency_s, c.bandwidth_bytes_s, c.copy_bytes_s};
  world.broadcast(figures, sizeof figures, 0);
  return MachineCosts{figures[0], figures[1], figures[2]};
}

// The best of rounds 2 and 3 of forward(), then backward(dy) on a random gradient made untimed (the first
// round builds the backend's primitives for these shapes and is not counted); every kernel finished
// before the clock is read. backward returns the bytes of the gradients it made. Round 2 also measures the
// scratch: the host tensor bytes held at once beyond those alive after forward, and beyond those alive
// before backward plus its gradients.
template <class Forward, class Backward>
LayerCost best_of_rounds(Backend& b, std::uint32_t seed, Forward forward, Backward backward) {
  LayerCost best{1e9, 1e9, 0, 0};
  for (int round = 0; round < 3; ++round) {
    Storage::reset_host_peak();
    auto t = Clock::now();
    const Tensor y = forward();
    b.synchronize();
    const double forward_s = since(t);
    const double forward_scratch =
        static_cast<double>(Storage::host_peak_bytes()) - static_cast<double>(Storage::host_bytes_in_use());
    const Tensor dy = b.to_device(random_plain(y.shape(), seed));
    Storage::reset_host_peak();
    const double before = static_cast<double>(Storage::host_bytes_in_use());
    t = Clock::now();
    const double gradients = backward(dy);
    b.synchronize();
    const double backward_s = since(t);
    const double backward_scratch = static_cast<double>(Storage::host_peak_bytes()) - before - gradients;
    if (round == 1) {
      best.forward_scratch_bytes = std::max(0.0, forward_scratch);
      best.backward_scratch_bytes = std::max(0.0, backward_scratch);
    }
    if (round > 0) {
      best.forward_s = std::min(best.forward_s, forward_s);
      best.backward_s = std::min(best.backward_s, backward_s);
    }
  }
  return best;
}

// Bytes of a backward's gradients (tensors of their own: a view shares its owner's, counted there).
double tensor_bytes(const std::vector<Tensor>& tensors) {
  double bytes = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) bytes += static_cast<double>(t.bytes());
  return bytes;
}

std::string LayerTimer::key(NodeId node, const std::vector<Shape>& inputs) {
  std::string k = std::to_string(node);
  for (const auto& s : inputs) k += " " + s.to_string();
  return k;
}

LayerCost LayerTimer::measure(NodeId node, const std::vector<Shape>& inputs) {
  const std::string k = key(node, inputs);
  if (auto it = cache_.find(k); it != cache_.end()) return it->second;
  Layer& layer = *model_.node_layer(node);
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    xs.push_back(random_plain(inputs[i], static_cast<std::uint32_t>(node * 7 + i)));
  const LayerCost best = best_of_rounds(
      model_.backend(), static_cast<std::uint32_t>(node), [&] { return layer.forward(xs, Mode::Train); },
      [&](const Tensor& dy) { return tensor_bytes(layer.backward(dy)); });
  cache_[k] = best;
  return best;
}

std::string LayerTimer::piece_key(NodeId node, std::int64_t n, const WindowPiece& piece) {
  std::string k = std::to_string(node) + " piece " + std::to_string(n);
  for (auto e : piece.in.extents()) k += " " + std::to_string(e);
  for (const auto* pads : {&piece.pad_lo, &piece.pad_hi})
    for (auto p : *pads) k += " " + std::to_string(p);
  return k;
}

LayerCost LayerTimer::measure_piece(NodeId node, std::int64_t n, const WindowPiece& piece) {
  const std::string k = piece_key(node, n, piece);
  if (auto it = cache_.find(k); it != cache_.end()) return it->second;
  Backend& b = model_.backend();
  ParameterTable& table = model_.parameters();
  const Layer& layer = *model_.node_layer(node);
  const auto* conv = dynamic_cast<const Convolution*>(&layer);
  const auto* pool = dynamic_cast<const Pooling*>(&layer);
  if (!conv && !pool) throw std::logic_error(layer.name() + ": pieces are timed for convolutions and pooling only");
  Shape shape{n, model_.shape(model_.node_inputs(node).at(0))[1]};
  for (auto e : piece.in.extents()) shape.dims.push_back(e);
  const Tensor x = b.to_device(random_plain(shape, static_cast<std::uint32_t>(node * 7)));
  std::unique_ptr<ConvolutionKernel> conv_kernel;
  std::unique_ptr<PoolingKernel> pool_kernel;
  Tensor w, bias, dw, db;
  if (conv) {
    conv_kernel = b.make_convolution(with_padding_of(piece, conv->spec()));
    const auto& handles = conv->parameter_handles();
    w = table.value(handles[0]);
    dw = b.zeros(w.shape());
    if (handles.size() > 1) {
      bias = table.value(handles[1]);
      db = b.zeros(bias.shape());
    }
  } else {
    pool_kernel = b.make_pooling(with_padding_of(piece, pool->spec()));
  }
  const LayerCost best = best_of_rounds(
      b, static_cast<std::uint32_t>(node),
      [&] {
        return conv ? conv_kernel->forward(x, w, bias.defined() ? &bias : nullptr, Mode::Train)
                    : pool_kernel->forward(x, Mode::Train);
      },
      [&](const Tensor& dy) {
        if (!conv) return tensor_bytes({pool_kernel->backward(dy)});
        const Tensor dx = conv_kernel->backward_data(dy, w);
        conv_kernel->backward_weights(x, dy, dw, db.defined() ? &db : nullptr);
        return tensor_bytes({dx});
      });
  cache_[k] = best;
  return best;
}

bool pieces_pay(const LayerCost& one_kernel, const LayerCost& pieces, double interior_forward_s, double transfer_s,
                double assembly_s) {
  const double cut = pieces.forward_s + pieces.backward_s + std::max(0.0, transfer_s - interior_forward_s) + assembly_s;
  return cut < one_kernel.forward_s + one_kernel.backward_s + transfer_s;
}

std::vector<GridShape> candidate_grids(int ranks, int spatial_rank) {
  std::vector<GridShape> grids;
  for (int samples = ranks; samples >= 1; --samples) {
    if (ranks % samples) continue;
    const int p = ranks / samples;
    // Every ordered factorisation of p into spatial_rank factors.
    std::vector<int> f(static_cast<std::size_t>(spatial_rank), 1);
    std::function<void(std::size_t, int)> place = [&](std::size_t axis, int left) {
      if (axis + 1 == f.size()) {
        f[axis] = left;
        grids.push_back({samples, f});
        return;
      }
      for (int d = left; d >= 1; --d)
        if (left % d == 0) {
          f[axis] = d;
          place(axis + 1, left / d);
        }
    };
    place(0, p);
  }
  return grids;
}

std::vector<GridPrediction> predict_grids(Model& model, const std::vector<GridShape>& grids,
                                          const PerformanceModelOptions& o, const MachineCosts& costs,
                                          Communicator& world) {
  std::vector<GridPrediction> out;
  std::vector<std::optional<SpatialPlan>> plans;
  for (const auto& g : grids) {
    GridPrediction p;
    p.grid = g;
    std::optional<SpatialPlan> plan;
    if (o.global_batch % g.samples != 0) {
      p.invalid = "the global batch " + std::to_string(o.global_batch) + " does not split into " +
                  std::to_string(g.samples) + " sample groups";
    } else {
      p.batch_per_group = o.global_batch / g.samples;
      try {
        plan.emplace(model, g);
      } catch (const GridError& e) {
        p.invalid = e.what();
      }
    }
    out.push_back(p);
    plans.push_back(std::move(plan));
  }

  // The distinct (node, shapes) pairs of every grid's slowest-slab rank (coordinates 0: uneven splits
  // give the first parts the extra position), measured by the ranks in turn and then shared.
  LayerTimer timer(model);
  struct Timing {
    NodeId node;
    std::vector<Shape> inputs;         // a whole layer on these local shapes, or
    std::optional<WindowPiece> piece;  // one piece of a split windowed layer
    std::int64_t n = 0;
  };
  std::map<std::string, Timing> work;
  for (std::size_t g = 0; g < grids.size(); ++g) {
    if (!plans[g]) continue;
    const std::vector<int> origin(grids[g].spatial.size(), 0);
    const std::int64_t n = out[g].batch_per_group;
    for (NodeId id = 1; id < model.node_count(); ++id) {
      auto shapes = timing_inputs(model, *plans[g], id, origin, n);
      std::string k = LayerTimer::key(id, shapes);
      work.emplace(std::move(k), Timing{id, std::move(shapes), std::nullopt, n});
      if (!split_windowed(model, *plans[g], id)) continue;
      const auto pieces = run_pieces(model, *plans[g], id, node_halo(*plans[g], id, origin), origin, o.overlap);
      if (pieces.size() < 2) continue;
      for (const auto& piece : pieces) work.emplace(LayerTimer::piece_key(id, n, piece), Timing{id, {}, piece, n});
    }
  }
  std::vector<double> times(4 * work.size(), 0.0);
  std::size_t index = 0;
  for (const auto& [k, item] : work) {
    if (static_cast<int>(index % static_cast<std::size_t>(world.size())) == world.rank()) {
      const LayerCost c =
          item.piece ? timer.measure_piece(item.node, item.n, *item.piece) : timer.measure(item.node, item.inputs);
      times[4 * index] = c.forward_s;
      times[4 * index + 1] = c.backward_s;
      times[4 * index + 2] = c.forward_scratch_bytes;
      times[4 * index + 3] = c.backward_scratch_bytes;
    }
    ++index;
  }
  world.sum(times.data(), times.size());
  // What a rank holds besides its tensors once every layer has run (oneDNN's code, primitives and scratchpad,
  // MPI's buffers): more than before the model, which is all the base saw.
  double runtime[1] = {std::max(o.base_memory_bytes, runtime_rss_bytes())};
  world.max(runtime, 1);
  index = 0;
  for (const auto& [k, item] : work) {
    timer.remember(k, {times[4 * index], times[4 * index + 1], times[4 * index + 2], times[4 * index + 3]});
    ++index;
  }

  const double parameters = static_cast<double>(model.parameters().parameter_count());
  const double parameter_bytes = parameters * kFloat;
  double largest_parameter_bytes = 0;
  for (const auto& e : model.parameters().parameters())
    largest_parameter_bytes = std::max(largest_parameter_bytes, static_cast<double>(e.shape.numel()) * kFloat);
  std::vector<double> layer_bytes(model.node_count(), 0.0);  // per node: what ZeRO stage 3 gathers for it
  for (NodeId id = 1; id < model.node_count(); ++id)
    for (auto h : model.node_layer(id)->parameter_handles())
      layer_bytes[id] += bytes_of(model.parameters().parameters()[h.index].shape);
  // Stage 3's transient: a layer's gathered weights while the gradient of the next layer with parameters is
  // summed (a layer's own weights go before its gradient is made), or the largest gradient alone.
  double gathered_bytes = largest_parameter_bytes, next = 0;
  for (NodeId id = model.node_count(); id-- > 1;)
    if (layer_bytes[id] > 0) {
      gathered_bytes = std::max(gathered_bytes, layer_bytes[id] + next);
      next = layer_bytes[id];
    }
  for (std::size_t g = 0; g < grids.size(); ++g) {
    if (!plans[g]) continue;
    const SpatialPlan& plan = *plans[g];
    GridPrediction& p = out[g];
    const GridShape& grid = grids[g];
    const int spatial = grid.spatial_ranks(), ranks = grid.ranks();
    const std::int64_t n = p.batch_per_group;
    const std::vector<int> origin(grid.spatial.size(), 0);
    double forward = 0, backward = 0, weight_gathers_s = 0;
    // Per node: its local output's bytes, and the haloed copy of its input a split convolution keeps.
    std::vector<double> outputs(model.node_count(), 0.0), copies(model.node_count(), 0.0),
        forward_scratch(model.node_count(), 0.0), backward_scratch(model.node_count(), 0.0);
    outputs[0] = bytes_of(local_output(model, plan, 0, origin, n));
    for (NodeId id = 1; id < model.node_count(); ++id) {
      const Layer& layer = *model.node_layer(id);
      const auto shapes = timing_inputs(model, plan, id, origin, n);
      LayerCost c = timer.cache().at(LayerTimer::key(id, shapes));
      forward_scratch[id] = c.forward_scratch_bytes;
      backward_scratch[id] = c.backward_scratch_bytes;
      // A layer the run may cut into pieces: each piece's kernel, as the run computes them, where that pays
      // (the interior, [0], hides the halo); else one kernel after the halo, and the run is told so.
      double interior_forward = 0;
      bool cut = false;
      if (split_windowed(model, plan, id)) {
        const HaloPlan halo = node_halo(plan, id, origin);
        const auto pieces = run_pieces(model, plan, id, halo, origin, o.overlap);
        if (pieces.size() > 1) {
          LayerCost sum;
          for (const auto& piece : pieces) {
            const LayerCost part = timer.cache().at(LayerTimer::piece_key(id, n, piece));
            sum.forward_s += part.forward_s;
            sum.backward_s += part.backward_s;
            if (&piece == &pieces[0]) interior_forward = part.forward_s;
          }
          const NodeId producer = model.node_inputs(id).at(0);
          const double unit = static_cast<double>(n * model.shape(producer)[1]) * kFloat;
          const double assembly = costs.copy(2 * bytes_of(local_output(model, plan, id, origin, n)));
          cut = pieces_pay(c, sum, interior_forward, halo_transfer_s(halo, unit, costs), assembly);
          if (cut) c = sum;
          else p.one_kernel_layers.push_back(layer.name());
        }
      }
      forward += c.forward_s;
      backward += c.backward_s;
      outputs[id] = bytes_of(local_output(model, plan, id, origin, n));
      const NodePlacement& node = plan.node(id);
      const NodePlacement& in = plan.node(model.node_inputs(id).at(0));
      // Stage 3 gathers the layer's weights for its forward, and for its backward where the run's op reads them
      // (SplitOp::backward_reads_weights): a split windowed layer only with an input gradient, the flat-split dense
      // layer never (it keeps its columns).
      const bool backward_gathers =
          split_windowed(model, plan, id) ? layer.input_gradient() : in.placement != Placement::kSplitFlat;
      if (layer_bytes[id] > 0)
        weight_gathers_s += (backward_gathers ? 2 : 1) * costs.allgather(spatial, layer_bytes[id]);
      // Redistributions into this layer: the busiest rank's receipts (there and back).
      for (std::size_t k = 0; k < node.inputs.size() && spatial > 1; ++k) {
        if (!plan.redistributes(id, k)) continue;
        const NodeId producer = model.node_inputs(id)[k];
        const double unit = static_cast<double>(n * model.shape(producer)[1]) * kFloat;
        double worst = 0;
        for (int r = 0; r < spatial; ++r) {
          const auto coords = grid_coords(grid, r);
          for (const auto& [from, to] : {std::pair{plan.node(producer).partition, node.inputs[k]},
                                         std::pair{node.inputs[k], plan.node(producer).partition}}) {
            const HaloPlan move = make_redistribution_plan(from, to, coords);
            const double bytes = static_cast<double>(std::max(move.halo_volume(), move.send_volume())) * unit;
            const double messages = static_cast<double>(std::max(move.receive.size(), move.send.size()));
            worst = std::max(worst, messages * costs.latency_s + bytes / costs.bandwidth_bytes_s +
                                        costs.copy(2 * static_cast<double>(to.owned(coords).volume()) * unit));
          }
        }
        p.redistribution_s += 2 * worst;
      }
      if (in.placement == Placement::kSplit && spatial > 1) {
        const double channels = static_cast<double>(model.shape(model.node_inputs(id).at(0))[1]);
        const double out_channels = static_cast<double>(model.shape(id)[1]);
        if (node.window) {
          // The busiest rank's exchange, forward and reverse, and the copies around it.
          double worst_exposed = 0, worst_copy = 0, worst_bytes = 0, worst_saved = 0;
          for (int r = 0; r < spatial; ++r) {
            const auto coords = grid_coords(grid, r);
            const HaloPlan halo = node_halo(plan, id, coords);
            const double unit = static_cast<double>(n) * channels * kFloat;
            if (!halo.exchanges() || plan.reads_loaded_input(id)) continue;  // it reads its input as it came
            worst_saved = std::max(worst_saved, static_cast<double>(halo.local.volume()) * unit);
            const double received = static_cast<double>(halo.halo_volume()) * unit;
            const double sent = static_cast<double>(halo.send_volume()) * unit;
            const double transfer = halo_transfer_s(halo, unit, costs);
            const SpatialBox owned_out = node.partition.owned(coords);
            const auto pieces = run_pieces(model, plan, id, halo, coords, o.overlap && cut);
            // The interior's time on this rank: measured on the first rank, scaled by its share elsewhere.
            const double interior = pieces.size() < 2 ? 0.0
                                    : r == 0          ? interior_forward
                                                      : c.forward_s * static_cast<double>(pieces[0].out.volume()) /
                                                   static_cast<double>(owned_out.volume());
            const double exposed =
                std::max(0.0, transfer - interior) + std::max(0.0, transfer - (o.overlap ? 0.5 * c.backward_s : 0.0));
            const double out_unit = static_cast<double>(n) * out_channels * kFloat * owned_out.volume();
            // Forward: pack + assemble the haloed input + (with pieces) the output; backward the same.
            const double copied =
                2 * (sent + static_cast<double>(halo.local.volume()) * unit + (pieces.size() > 1 ? out_unit : 0.0));
            worst_exposed = std::max(worst_exposed, exposed);
            worst_copy = std::max(worst_copy, costs.copy(copied));
            worst_bytes = std::max(worst_bytes, 2 * received);
          }
          p.halo_s += worst_exposed;
          p.copy_s += worst_copy;
          p.halo_bytes += worst_bytes;
          if (layer.saves() == Layer::Saves::kInput) copies[id] = worst_saved;
        } else if (dynamic_cast<const BatchNorm*>(&layer)) {
          const double stats = 2 * channels * kDouble;
          p.reduction_s +=
              2 * costs.allreduce(spatial, stats) + (o.sync_bn ? 2 * costs.allreduce(grid.samples, stats) : 0);
        } else if (dynamic_cast<const InstanceNorm*>(&layer)) {
          p.reduction_s += 2 * costs.allreduce(spatial, 2 * static_cast<double>(n) * channels * kDouble);
        } else if (dynamic_cast<const GlobalAveragePooling*>(&layer)) {
          p.reduction_s += costs.allreduce(spatial, static_cast<double>(n) * channels * kFloat);
        }
      } else if (in.placement == Placement::kSplitFlat && spatial > 1) {
        p.reduction_s += costs.allreduce(spatial, static_cast<double>(n * model.shape(id)[1]) * kFloat);
      }
    }
    if (spatial > 1) p.reduction_s += 2 * costs.allreduce(spatial, 64 * kDouble);  // loss and its statistics
    p.compute_s = forward + backward;
    const bool sharded = o.shard_state && spatial > 1;
    const bool sharded_weights = sharded && o.shard_weights;
    if (ranks > 1) p.allreduce_bytes = parameter_bytes;
    if (sharded) {
      // ZeRO stage 2 over MPI (what the model measures): each gradient's whole sum over the spatial group in
      // 1 MiB pieces as backward goes (exposed where it outlasts backward), then the own part's sum over the
      // sample groups and the gather of the updated parts.
      const double sums = costs.allreduce(spatial, parameter_bytes);
      const double last_piece =
          costs.allreduce(spatial, std::min(parameter_bytes, static_cast<double>(GradientReduceScatter::kPieceBytes)));
      p.allreduce_s = std::max(last_piece, sums - backward) + costs.allreduce(grid.samples, parameter_bytes / spatial);
      // Stage 3 gathers each layer's weights as it runs; stage 2 gathers the updated parts once.
      p.allreduce_s += sharded_weights ? weight_gathers_s : costs.allgather(spatial, parameter_bytes);
    } else if (ranks > 1) {
      const double total = costs.allreduce(ranks, parameter_bytes);
      const double last_bucket = costs.allreduce(ranks, std::min(parameter_bytes, kBucketBytes));
      p.allreduce_s = std::max(last_bucket, total - backward);
    }
    p.step_s = p.compute_s + p.halo_s + p.redistribution_s + p.copy_s + p.reduction_s + p.allreduce_s;
    // Parameters, gradients and the optimizer state (sharded: this rank's part of both, and the largest tensor's
    // gradient on its way; stage 3: this rank's part of the parameters too, and what is gathered beside that
    // gradient), the input batch, and the activations at their peak.
    double part_bytes = 0;  // the largest rank's part (LARS cuts between tensors: uneven)
    for (int r = 0; sharded && r < spatial; ++r)
      part_bytes = std::max(
          part_bytes,
          static_cast<double>(arena_part(model.parameters(), spatial, r, o.whole_tensor_parts).size()) * kFloat);
    const double weights = sharded_weights ? part_bytes : parameter_bytes;
    const double kept =
        sharded ? (1.0 + o.optimizer_states) * part_bytes + (sharded_weights ? gathered_bytes : largest_parameter_bytes)
                : (1 + o.optimizer_states) * parameter_bytes;
    p.activation_bytes = activation_peak_bytes(model, outputs, copies, forward_scratch, backward_scratch);
    p.runtime_bytes = runtime[0];
    p.memory_bytes = p.runtime_bytes + weights + kept + outputs[0] + p.activation_bytes;
  }
  return out;
}

int best_grid(const std::vector<GridPrediction>& predictions) {
  int best = -1;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const auto& p = predictions[i];
    if (!p.invalid.empty()) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const auto& b = predictions[static_cast<std::size_t>(best)];
    if (p.step_s < b.step_s * (1 - 1e-9) ||
        (p.step_s <= b.step_s * (1 + 1e-9) && p.grid.spatial_ranks() < b.grid.spatial_ranks()))
      best = static_cast<int>(i);
  }
  return best;
}

std::string explain_table(const std::vector<GridPrediction>& predictions, const MachineCosts& costs, int chosen) {
  std::ostringstream s;
  s << std::fixed;
  s << "machine: latency " << std::setprecision(1) << costs.latency_s * 1e6 << " us, bandwidth "
    << costs.bandwidth_bytes_s / 1e9 << " GB/s, copy " << costs.copy_bytes_s / 1e9 << " GB/s\n";
  s << std::left << std::setw(11) << "grid" << std::right << std::setw(7) << "batch" << std::setw(10) << "step ms"
    << std::setw(11) << "samples/s" << std::setw(11) << "compute" << std::setw(9) << "halo" << std::setw(9) << "redist"
    << std::setw(9) << "copy" << std::setw(9) << "reduce" << std::setw(11) << "allreduce" << std::setw(10) << "tried"
    << std::setw(11) << "mem MiB" << std::setw(11) << "halo MiB" << std::setw(11) << "grad MiB"
    << "\n";
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const auto& p = predictions[i];
    s << std::left << std::setw(11) << p.grid.to_string() << std::right;
    if (!p.invalid.empty()) {
      s << "  cannot run: " << p.invalid << "\n";
      continue;
    }
    s << std::setw(7) << p.batch_per_group << std::setprecision(1) << std::setw(10) << p.step_s * 1e3
      << std::setprecision(2) << std::setw(11) << p.samples_per_s() << std::setprecision(1) << std::setw(11)
      << p.compute_s * 1e3 << std::setw(9) << p.halo_s * 1e3 << std::setw(9) << p.redistribution_s * 1e3 << std::setw(9)
      << p.copy_s * 1e3 << std::setw(9) << p.reduction_s * 1e3 << std::setw(11) << p.allreduce_s * 1e3 << std::setw(10)
      << (p.measured_s > 0 ? std::to_string(std::lround(p.measured_s * 1e3)) : std::string("-")) << std::setw(11)
      << p.memory_bytes / (1 << 20) << std::setw(11) << p.halo_bytes / (1 << 20) << std::setw(11)
      << p.allreduce_bytes / (1 << 20) << (static_cast<int>(i) == chosen ? "   <- chosen" : "") << "\n";
  }
  s << "(times in ms per step on the busiest rank; compute measured per layer and slab shape on this machine; "
       "tried: the fastest of three training steps measured on that grid)\n";
  return s.str();
}

namespace {

// A "Name: N kB" line of /proc/self/status, in bytes (0 if absent).
double status_bytes(const char* format) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kib) == 1) break;
  std::fclose(f);
  return kib * 1024.0;
}

}  // namespace

double peak_virtual_bytes() { return status_bytes("VmPeak: %lf kB"); }

double runtime_rss_bytes() {
  const double tensors = static_cast<double>(Storage::host_bytes_in_use() + Storage::host_bytes_kept());
  return std::max(0.0, status_bytes("VmRSS: %lf kB") - tensors);
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

}  // namespace fanstore::trainer
