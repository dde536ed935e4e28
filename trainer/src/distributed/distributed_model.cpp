// The distributed executor: walks the model graph with one split op per node, keeps each node's
// slab until its last consumer has run, sums gradients of nodes with several consumers, and zeroes the parameter
// gradients of replicated layers on all but one spatial rank.
#include "trainer/distributed_model.hpp"

#include <stdexcept>
#include <utility>

#include "split_ops.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer {

Shape box_shape(std::int64_t n, std::int64_t c, const SpatialBox& box) {
  Shape s{n, c};
  for (auto e : box.extents()) s.dims.push_back(e);
  return s;
}

Tensor crop(Backend& backend, const Tensor& src, const SpatialBox& src_box, const SpatialBox& region) {
  if (src_box == region) return src;
  Tensor out = backend.zeros(box_shape(src.shape()[0], src.shape()[1], region));
  copy_region(backend, src, src_box, out, region, region, false);
  return out;
}

void sum_tensor(Tensor& t, Communicator& comm) {
  if (!t.is_plain() || (t.dtype() != DType::F32 && t.dtype() != DType::F64))
    throw std::invalid_argument("sum_tensor: needs a plain F32 or F64 tensor, got " + t.shape().to_string() +
                                (t.is_plain() ? "" : " in layout " + t.layout()->describe()));
  if (comm.size() == 1) return;
  const auto n = static_cast<std::size_t>(t.numel());
  if (t.dtype() == DType::F64) comm.sum(static_cast<double*>(t.raw()), n);
  else comm.sum(static_cast<float*>(t.raw()), n);
}

namespace {

class PassThrough final : public SplitOp {
 public:
  explicit PassThrough(Layer& layer) : layer_(layer) {}
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override { return layer_.forward(inputs, mode); }
  std::vector<Tensor> backward(Tensor dy) override { return layer_.backward(std::move(dy)); }

 private:
  Layer& layer_;
};

}  // namespace

void SplitContext::spatial_sum(Tensor& t) { sum_tensor(t, grid.spatial()); }
void SplitContext::statistics_sum(Tensor& t) {
  sum_tensor(t, grid.spatial());
  if (options.sync_bn) sum_tensor(t, grid.samples());
}

std::unique_ptr<SplitOp> make_pass_through(Layer& layer) { return std::make_unique<PassThrough>(layer); }

std::unique_ptr<SplitOp> make_split_op(SplitContext& ctx, Model& model, NodeId id, const SpatialBox& input_box) {
  Layer& layer = *model.node_layer(id);
  const NodePlacement& node = ctx.plan.node(id);
  const NodeId first_input = model.node_inputs(id).at(0);
  const NodePlacement& in = ctx.plan.node(first_input);
  const Partition& reads = node.inputs.at(0);  // the first input's split as this layer reads it
  if (auto* dropout = dynamic_cast<Dropout*>(&layer)) {
    // Each rank draws its part of the serial mask (a function of the global element index): its
    // sample group's samples of the global batch, and its slab of a split tensor.
    const Shape& shape = model.shape(id);
    const std::int64_t groups = ctx.grid.shape().samples;
    GlobalPlacement placement;
    placement.global = shape;
    placement.global[0] = shape[0] * groups;
    placement.offset.assign(static_cast<std::size_t>(shape.rank()), 0);
    placement.offset[0] = shape[0] * ctx.grid.sample_group();
    if (in.placement == Placement::kSplit) {
      const SpatialBox slab = reads.owned(ctx.grid.coords());
      for (std::size_t a = 0; a < slab.axes.size(); ++a) placement.offset[a + 2] = slab.axes[a].lo;
    }
    dropout->set_placement(placement);
    return make_pass_through(layer);
  }
  if (in.placement == Placement::kReplicated) return make_pass_through(layer);
  if (in.placement == Placement::kSplitFlat)
    return make_split_flat_linear(ctx, layer, reads, model.shape(model.node_inputs(first_input).at(0))[1]);
  if (node.window) {
    const SpatialBox given = ctx.plan.reads_loaded_input(id) ? input_box : reads.owned(ctx.grid.coords());
    return make_split_windowed(ctx, layer, id, reads, node.partition, *node.window, given);
  }
  if (dynamic_cast<BatchNorm*>(&layer)) return make_split_batch_norm(ctx, layer, reads);
  if (dynamic_cast<InstanceNorm*>(&layer)) return make_split_instance_norm(ctx, layer, reads);
  if (dynamic_cast<GlobalAveragePooling*>(&layer)) return make_split_global_pooling(ctx, layer, reads);
  // Element-wise layers (activations, add, concat, dropout) and Flatten run unchanged on the slab.
  return make_pass_through(layer);
}

DistributedOptions distributed_options(const GridOptions& options, int spatial_rank,
                                       const std::vector<std::string>& one_kernel_layers) {
  DistributedOptions d;
  d.sync_bn = options.sync_bn;
  d.overlap = options.overlap;
  d.one_kernel_layers.insert(one_kernel_layers.begin(), one_kernel_layers.end());
  if (!options.layer_split.empty()) d.layer_splits = parse_layer_splits(options.layer_split, spatial_rank);
  return d;
}

DistributedModel::DistributedModel(Model& model, ProcessGrid& grid, DistributedOptions options)
    : model_(model), grid_(grid), options_(options), plan_(model, grid.shape(), options_.layer_splits) {
  // The split layers, halos and reduced statistics are F32 (a half-type halo would also need a
  // half-type transport): mixed precision runs plain data parallelism only.
  if (model.backend().activation_dtype() != DType::F32)
    throw GridError(
        "a spatial --grid (or --sync-bn) computes in fp32; pass --precision fp32, or leave out --grid "
        "for mixed-precision data parallelism");
  input_slab_ = plan_.input_partition().owned(grid.coords());
  input_box_ = plan_.input_read_box(grid.coords());
  local_input_shape_ = box_shape(model.input_shape()[0], model.input_shape()[1], input_box_);
  context_ = std::make_unique<SplitContext>(SplitContext{model.backend(), model.parameters(), grid, plan_, options_});
  ops_.resize(model.node_count());
  redistributions_.resize(model.node_count());
  for (NodeId id = 1; id < model.node_count(); ++id) {
    ops_[id] = make_split_op(*context_, model, id, input_box_);
    const auto& inputs = model.node_inputs(id);
    redistributions_[id].resize(inputs.size());
    for (std::size_t k = 0; k < inputs.size(); ++k)
      if (plan_.redistributes(id, k))
        redistributions_[id][k] = std::make_unique<Redistribution>(
            model.backend(), grid.spatial(), plan_.node(inputs[k]).partition, plan_.node(id).inputs[k], grid.coords(),
            8000 + 4 * static_cast<int>(id) + 2 * static_cast<int>(k));
  }
}

DistributedModel::~DistributedModel() = default;

template <typename F>
auto DistributedModel::with_values(NodeId id, bool reads_weights, F&& run) {
  // ZeRO stage 3: a layer's weights exist whole only while it runs (a no-op unless the table keeps a part).
  struct Gathered {
    ParameterTable& table;
    const std::vector<ParameterHandle>& handles;
    ~Gathered() { table.drop_values(handles); }  // also when the layer throws: no stale copy outlives a step
  } gathered{model_.parameters(), model_.node_layer(id)->parameter_handles()};
  if (reads_weights) gathered.table.gather_values(gathered.handles);
  return run();
}

std::size_t DistributedModel::kernels_of(const std::string& layer) const {
  for (NodeId id = 1; id < model_.node_count(); ++id)
    if (const Layer* l = model_.node_layer(id); l && l->name() == layer) return ops_[id]->kernels();
  throw std::out_of_range("no layer named " + layer);
}

SpatialBox DistributedModel::output_slab() const {
  return output_split() ? plan_.output().partition.owned(grid_.coords()) : SpatialBox{};
}

Shape DistributedModel::local_output_shape() const {
  const Shape& global = model_.output_shape();
  if (!output_split()) return global;
  return box_shape(global[0], global[1], output_slab());
}

Tensor DistributedModel::forward(const Tensor& x, Mode mode) {
  if (x.shape() != local_input_shape_)
    throw std::invalid_argument(model_.name() + ": this rank's input is " + x.shape().to_string() + ", expected " +
                                local_input_shape_.to_string() + " (its slab " + input_box_.to_string() + ")");
  Backend& b = model_.backend();
  values_.assign(model_.node_count(), Tensor());
  values_[0] = b.to_device(x);
  for (NodeId id = 1; id < model_.node_count(); ++id) {
    std::vector<Tensor> in;
    const auto& inputs = model_.node_inputs(id);
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const auto& redistribution = redistributions_[id][k];
      // Only windowed consumers of the model input that read it as loaded get its halo; the others the slab.
      const bool loaded = plan_.node(id).window.has_value() && !redistribution;
      Tensor v = inputs[k] == 0 && !loaded ? crop(b, values_[0], input_box_, input_slab_) : values_[inputs[k]];
      in.push_back(redistribution ? redistribution->forward(v) : v);
    }
    values_[id] = with_values(id, true, [&] { return ops_[id]->forward(in, mode); });
    for (NodeId input : inputs)  // backward reads no node value (Model::last_readers)
      if (model_.last_readers()[input] == id && input != model_.output_node()) values_[input] = Tensor();
  }
  Tensor y = b.to_plain(values_[model_.output_node()]);
  if (mode != Mode::Train) values_.clear();  // inference keeps nothing for a backward
  return y;
}

Tensor DistributedModel::backward(const Tensor& dy) {
  if (values_.size() != model_.node_count())
    throw std::logic_error(model_.name() + ": backward needs a forward in Mode::Train first");
  Backend& b = model_.backend();
  gradients_.assign(model_.node_count(), Tensor());
  gradients_[model_.output_node()] = b.to_device(dy);
  for (NodeId id = model_.output_node(); id >= 1; --id) {
    if (!gradients_[id].defined()) continue;
    auto grads = with_values(id, ops_[id]->backward_reads_weights(),
                             [&] { return ops_[id]->backward(std::move(gradients_[id])); });
    Layer& layer = *model_.node_layer(id);
    // A layer on a replicated tensor (or part) computes the same parameter gradient on every rank
    // holding it: count it once.
    const NodeId first_input = model_.node_inputs(id).at(0);
    const bool counted = plan_.node(first_input).placement == Placement::kReplicated
                             ? grid_.spatial_index() == 0
                             : plan_.node(id).inputs.at(0).first_replica(grid_.coords());
    if (!counted)
      for (auto h : layer.parameter_handles()) {
        Tensor g = model_.parameters().gradient(h);
        b.fill(g, 0.f);
      }
    if (gradient_ready_) gradient_ready_(layer);
    gradients_[id] = Tensor();
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;  // the model input's, when not asked for (Model::set_input_gradient)
      if (const auto& redistribution = redistributions_[id][k]) grads[k] = redistribution->backward(grads[k]);
      Tensor& slot = gradients_[model_.node_inputs(id)[k]];
      slot = slot.defined() ? b.add({slot, grads[k]}) : grads[k];
    }
  }
  values_.clear();
  const Tensor dx = std::move(gradients_[0]);
  gradients_.clear();
  return dx.defined() ? b.to_plain(dx) : Tensor();
}

}  // namespace fanstore::trainer
