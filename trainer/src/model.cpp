// Model graph: building with shape inference, forward/backward in node order, the layer table.
#include "trainer/model.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace fanstore::trainer {

Model::Model(std::string name, std::shared_ptr<Backend> backend, const Shape& input_shape)
    : name_(std::move(name)), backend_(std::move(backend)) {
  nodes_.push_back(Node{nullptr, {}, input_shape});
}

NodeId Model::add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs) {
  if (parameters_.finalized()) throw std::logic_error(name_ + ": layer '" + layer->name() + "' added after finalize()");
  std::vector<Shape> shapes;
  for (auto id : inputs) {
    if (id >= nodes_.size())
      throw std::invalid_argument(layer->name() + ": input node " + std::to_string(id) + " does not exist");
    shapes.push_back(nodes_[id].shape);
  }
  Shape out = layer->output_shape(shapes);
  layer->attach(*backend_, parameters_);
  nodes_.push_back(Node{std::move(layer), std::move(inputs), out});
  return nodes_.size() - 1;
}

void Model::check_shape(NodeId node, const Shape& expected, const std::string& block) const {
  if (shape(node) != expected)
    throw std::logic_error(name_ + ": after " + block + " the shape is " + shape(node).to_string() + ", expected " +
                           expected.to_string());
}

void Model::finalize(NodeId output, std::uint64_t seed) {
  output_ = output;
  last_reader_.assign(nodes_.size(), 0);
  for (NodeId i = 1; i < nodes_.size(); ++i)
    for (auto id : nodes_[i].inputs) last_reader_[id] = std::max(last_reader_[id], i);
  // Initialisation is host code on host arenas; commit() then moves them to the backend's device.
  parameters_.finalize(*backend_);
  Rng rng(seed);
  for (auto& n : nodes_)
    if (n.layer) n.layer->initialize(rng);
  parameters_.commit();
}

void Model::set_input_gradient(bool needed) {
  for (auto& n : nodes_)
    if (n.layer && std::all_of(n.inputs.begin(), n.inputs.end(), [](NodeId id) { return id == 0; }))
      n.layer->set_input_gradient(needed);
}

void Model::set_step(std::uint64_t step) {
  for (auto& n : nodes_)
    if (n.layer) n.layer->set_step(step);
}

namespace {

// Errors from inside a layer (a kernel, a CUDA call, a shape) name the layer and the pass, so a
// failure deep in a model reads "layer 'layer3.2.conv2' backward: cudnnConvolutionBackwardData: ...".
template <class F>
auto in_layer(const Layer& layer, const char* pass, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("layer '" + layer.name() + "' " + pass + ": " + e.what());
  } catch (const std::logic_error& e) {
    throw std::logic_error("layer '" + layer.name() + "' " + pass + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error("layer '" + layer.name() + "' " + pass + ": " + e.what());
  }
}

}  // namespace

Tensor Model::forward(const Tensor& x, Mode mode) {
  if (!parameters_.finalized()) throw std::logic_error(name_ + ": forward before finalize()");
  if (x.shape() != input_shape())
    throw std::invalid_argument(name_ + ": input " + x.shape().to_string() + ", expected " + input_shape().to_string());
  if (x.device() != backend_->device())
    throw std::invalid_argument(name_ + ": input is in " + std::string(device_name(x.device())) +
                                " memory, the model computes on " + device_name(backend_->device()) +
                                " (Backend::to_device)");
  values_.assign(nodes_.size(), Tensor());
  // Activations travel in the backend's activation type (mixed precision); the output is F32.
  values_[0] = backend_->cast(x, backend_->activation_dtype());
  for (NodeId i = 1; i < nodes_.size(); ++i) {
    std::vector<Tensor> in;
    for (auto id : nodes_[i].inputs) in.push_back(values_[id]);
    Layer& layer = *nodes_[i].layer;
    values_[i] = in_layer(layer, "forward", [&] { return layer.forward(in, mode); });
    for (auto id : nodes_[i].inputs)
      if (last_reader_[id] == i && id != output_) values_[id] = Tensor();
  }
  Tensor y = backend_->cast(backend_->to_plain(values_[output_]), DType::F32);
  if (mode != Mode::Train) values_.clear();  // inference keeps nothing for a backward
  return y;
}

void Model::accumulate(Tensor& slot, const Tensor& gradient) {
  if (!slot.defined()) {
    slot = gradient;  // shared: written over in place only once nothing else holds it (Tensor::sole_owner)
    return;
  }
  slot = backend_->add({slot, gradient});
}

Tensor Model::backward(const Tensor& dy) {
  if (values_.size() != nodes_.size())
    throw std::logic_error(name_ + ": backward needs a forward in Mode::Train first");
  if (dy.shape() != output_shape())
    throw std::invalid_argument(name_ + ": output gradient " + dy.shape().to_string() + ", expected " +
                                output_shape().to_string());
  gradients_.assign(nodes_.size(), Tensor());
  gradients_[output_] = backend_->cast(dy, backend_->activation_dtype());
  for (NodeId i = output_; i >= 1; --i) {
    if (!gradients_[i].defined()) continue;  // does not reach the output
    Layer& layer = *nodes_[i].layer;
    auto grads = in_layer(layer, "backward", [&] { return layer.backward(std::move(gradients_[i])); });
    if (gradient_ready_) gradient_ready_(*nodes_[i].layer);
    gradients_[i] = Tensor();  // release early: activations' gradients dominate memory
    for (std::size_t k = 0; k < grads.size(); ++k)
      if (grads[k].defined()) accumulate(gradients_[nodes_[i].inputs[k]], grads[k]);
  }
  values_.clear();  // one backward per forward: the output and input go now, not at the next step
  const Tensor dx = std::move(gradients_[0]);
  gradients_.clear();
  if (!dx.defined()) return Tensor();
  return backend_->cast(backend_->to_plain(dx), DType::F32);
}

Layer& Model::layer(const std::string& name) {
  for (auto& n : nodes_)
    if (n.layer && n.layer->name() == name) return *n.layer;
  throw std::invalid_argument(name_ + ": no layer named '" + name + "'");
}

std::vector<LayerRow> Model::layer_table() const {
  std::vector<LayerRow> rows;
  rows.push_back({"input", "Input", input_shape(), 0});
  for (std::size_t i = 1; i < nodes_.size(); ++i)
    rows.push_back(
        {nodes_[i].layer->name(), nodes_[i].layer->kind(), nodes_[i].shape, nodes_[i].layer->parameter_count()});
  return rows;
}

std::string Model::describe() const {
  auto rows = layer_table();
  std::size_t name_w = 4, kind_w = 4, shape_w = 12;
  for (const auto& r : rows) {
    name_w = std::max(name_w, r.name.size());
    kind_w = std::max(kind_w, r.kind.size());
    shape_w = std::max(shape_w, r.output.to_string().size());
  }
  std::ostringstream out;
  out << std::left << std::setw(static_cast<int>(name_w) + 2) << "name" << std::setw(static_cast<int>(kind_w) + 2)
      << "type" << std::setw(static_cast<int>(shape_w) + 2) << "output shape" << std::right << std::setw(12)
      << "parameters"
      << "\n";
  for (const auto& r : rows)
    out << std::left << std::setw(static_cast<int>(name_w) + 2) << r.name << std::setw(static_cast<int>(kind_w) + 2)
        << r.kind << std::setw(static_cast<int>(shape_w) + 2) << r.output.to_string() << std::right << std::setw(12)
        << r.parameters << "\n";
  out << "parameters: " << parameters_.parameter_count() << "\n";
  return out.str();
}

}  // namespace fanstore::trainer
