// Model: a directed acyclic graph of layers built in topological order, with one input and one
// output, explicit forward/backward through the graph, and a describe() table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/layer.hpp"
#include "trainer/parameters.hpp"

namespace fanstore::trainer {

using NodeId = std::size_t;

struct LayerRow {
  std::string name, kind;
  Shape output;
  std::size_t parameters;
};

class Model {
 public:
  // input_shape includes the batch: (N, C, H, W) or (N, C, D, H, W).
  Model(std::string name, std::shared_ptr<Backend> backend, const Shape& input_shape);

  NodeId input() const { return 0; }
  // Appends a layer fed by earlier nodes and returns its node. Infers the output shape now, so a
  // builder fails at the first layer that does not fit (with the layer's name in the message).
  NodeId add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs);
  template <class L, class... Args>
  NodeId add(std::vector<NodeId> inputs, Args&&... args) {
    return add(std::make_unique<L>(std::forward<Args>(args)...), std::move(inputs));
  }
  const Shape& shape(NodeId node) const { return nodes_.at(node).shape; }
  // The builders' shape assertion after each block.
  void check_shape(NodeId node, const Shape& expected, const std::string& block) const;

  // Marks the output, allocates the parameter arenas, applies PyTorch's default initialisation and
  // moves the arenas to the backend's device.
  void finalize(NodeId output, std::uint64_t seed = 0);

  // x: plain input_shape() on the backend's device (Backend::to_device). Returns the output in
  // plain layout on that device (the loss boundary).
  Tensor forward(const Tensor& x, Mode mode);
  // dy: output_shape() on the backend's device. Writes every parameter gradient; returns d(input), plain.
  Tensor backward(const Tensor& dy);
  // The optimizer step the next forward belongs to (Layer::set_step): the training loop calls it so
  // a resumed run draws the same dropout masks as an uninterrupted one.
  void set_step(std::uint64_t step);
  // Called inside backward() right after each layer's backward, in backward order: from then on that
  // layer's parameter gradients are final, so a gradient allreduce can start on them while the
  // earlier layers still compute (see trainer/distributed.hpp). Empty = no hook.
  using GradientReadyHook = std::function<void(const Layer&)>;
  void set_gradient_ready_hook(GradientReadyHook hook) { gradient_ready_ = std::move(hook); }
  // Whether backward returns the gradient of the model input (on by default: tests compare it; training
  // turns it off, so the layers on the input skip their data gradient and backward returns no tensor).
  void set_input_gradient(bool needed);

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return nodes_.front().shape; }
  const Shape& output_shape() const { return nodes_.at(output_).shape; }
  ParameterTable& parameters() { return parameters_; }
  const ParameterTable& parameters() const { return parameters_; }
  Backend& backend() { return *backend_; }
  std::size_t layer_count() const { return nodes_.size() - 1; }
  Layer& layer(const std::string& name);

  // The graph, read-only (distributed execution walks it with its own per-layer code): node 0 is the
  // input (no layer), every other node's inputs come before it.
  std::size_t node_count() const { return nodes_.size(); }
  const Layer* node_layer(NodeId node) const { return nodes_.at(node).layer.get(); }
  Layer* node_layer(NodeId node) { return nodes_.at(node).layer.get(); }
  const std::vector<NodeId>& node_inputs(NodeId node) const { return nodes_.at(node).inputs; }
  NodeId output_node() const { return output_; }
  // Per node, the last node that reads its value in forward (0: none): backward reads no node value
  // (each layer keeps what it needs), so forward drops each value after its last reader.
  const std::vector<NodeId>& last_readers() const { return last_reader_; }

  std::vector<LayerRow> layer_table() const;
  // One row per layer (name, type, output shape, parameters), then "parameters: N".
  std::string describe() const;

 private:
  struct Node {
    std::unique_ptr<Layer> layer;  // null for the input node
    std::vector<NodeId> inputs;
    Shape shape;
  };
  void accumulate(Tensor& slot, const Tensor& gradient);

  std::string name_;
  std::shared_ptr<Backend> backend_;
  ParameterTable parameters_;
  std::vector<Node> nodes_;
  NodeId output_ = 0;
  std::vector<NodeId> last_reader_;
  std::vector<Tensor> values_;     // per node, last forward, until its last reader has run
  std::vector<Tensor> gradients_;  // per node, during backward
  GradientReadyHook gradient_ready_;
};

}  // namespace fanstore::trainer
