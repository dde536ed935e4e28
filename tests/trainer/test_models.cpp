// Model builders: parameter counts, shape checks, the describe table, and a small training step.
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "trainer/commands.hpp"
#include "trainer/losses.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer::testing {
namespace {

std::unique_ptr<Model> build(const std::string& name, std::int64_t size, std::int64_t classes = 0,
                             std::int64_t batch = 1) {
  ModelOptions o;
  o.input_size = size;
  o.classes = classes;
  o.batch = batch;
  return build_model(name, test_backend(), o);
}

TEST(Models, ResNet50ParameterCountMatchesTorchvision) {
  EXPECT_EQ(build("resnet50", 224)->parameters().parameter_count(), 25557032u);
  // Only fc changes with the class count: 2048 * 10 + 10 instead of 2048 * 1000 + 1000.
  EXPECT_EQ(build("resnet50", 64, 10)->parameters().parameter_count(), 25557032u - 2049000u + 20490u);
  // BN running statistics are buffers, not parameters: 53 BN layers, 2 buffers of C each.
  EXPECT_EQ(build("resnet50", 224)->parameters().buffers().size(), 106u);
}

TEST(Models, ResNet50AnyInputSize) {
  EXPECT_EQ(build("resnet50", 224)->output_shape(), (Shape{1, 1000}));
  EXPECT_EQ(build("resnet50", 97, 7, 3)->output_shape(), (Shape{3, 7}));
  EXPECT_THROW(build("resnet50", 16), std::invalid_argument);
}

TEST(Models, CosmoFlowParameterCountAndShapes) {
  // convs 3,488 + 55,360 + 221,312 + 884,992 + 3,539,456; dense 4,194,432 + 8,256 + 260.
  EXPECT_EQ(build("cosmoflow", 128)->parameters().parameter_count(), 8907556u);
  auto small = build("cosmoflow", 32, 0, 2);
  EXPECT_EQ(small->input_shape(), (Shape{2, 4, 32, 32, 32}));
  EXPECT_EQ(small->output_shape(), (Shape{2, 4}));
  EXPECT_EQ(small->parameters().parameter_count(), 8907556u - 4194432u + (512 * 128 + 128));
}

TEST(Models, UNet3dShapesAndLimits) {
  auto m = build("unet3d", 64);
  EXPECT_EQ(m->input_shape(), (Shape{1, 1, 64, 64, 64}));
  EXPECT_EQ(m->output_shape(), (Shape{1, 3, 64, 64, 64}));
  // Parameters do not depend on the input size (fully convolutional).
  EXPECT_EQ(m->parameters().parameter_count(), build("unet3d", 128)->parameters().parameter_count());
  ModelOptions slab;
  slab.input_size = 64;
  slab.input_depth = 32;  // the cross-check's 32 x 64 x 64: 1 x 2 x 2 voxels at the bottleneck
  EXPECT_EQ(build_model("unet3d", test_backend(), slab)->output_shape(), (Shape{1, 3, 32, 64, 64}));
  EXPECT_THROW(build("unet3d", 48), std::invalid_argument);  // not a multiple of 32
  EXPECT_THROW(build("unet3d", 32), std::invalid_argument);  // bottleneck would be 1 voxel
}

TEST(Models, DescribeEndsWithParameterCount) {
  std::ostringstream out, err;
  DescribeOptions o{"resnet50", {}};
  ASSERT_EQ(describe_command(o, out, err), 0) << err.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("layer4.2.conv3"), std::string::npos);
  EXPECT_NE(text.find("(1, 2048, 7, 7)"), std::string::npos);
  EXPECT_TRUE(text.ends_with("parameters: 25557032\n"));
  std::ostringstream out2, err2;
  EXPECT_EQ(describe_command({"vgg", {}}, out2, err2), 1);
  EXPECT_NE(err2.str().find("unknown model"), std::string::npos);
}

// A few SGD steps on a fixed batch must lower the loss (forward, backward and the arena wired up).
TEST(Models, CosmoFlowSgdStepsLowerTheLoss) {
  auto m = build("cosmoflow", 32, 0, 2);
  Rng rng(42);
  Tensor x = random_tensor(m->input_shape(), rng);
  Tensor target = random_tensor(m->output_shape(), rng, -0.5f, 0.5f);
  std::vector<double> losses;
  for (int step = 0; step < 4; ++step) {
    LossResult l = mean_squared_error(m->forward(x, Mode::Train), target);
    losses.push_back(l.loss);
    m->backward(l.gradient);
    auto& p = m->parameters();
    for (std::size_t i = 0; i < p.parameter_count(); ++i) p.values()[i] -= 0.05f * p.gradients()[i];
  }
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), losses.front());
}

TEST(Models, WithoutTheInputGradientTheParameterGradientsAreTheSame) {
  // Training turns the model input's gradient off: the first convolution skips its data gradient.
  std::vector<std::vector<float>> gradients;
  for (bool needed : {true, false}) {
    auto m = build("cosmoflow", 32, 0, 2);
    m->set_input_gradient(needed);
    Rng rng(42);
    const Tensor x = random_tensor(m->input_shape(), rng);
    const Tensor target = random_tensor(m->output_shape(), rng, -0.5f, 0.5f);
    const Tensor dx = m->backward(mean_squared_error(m->forward(x, Mode::Train), target).gradient);
    EXPECT_EQ(dx.defined(), needed);
    gradients.push_back(m->parameters().read(Arena::Gradients));
  }
  EXPECT_EQ(gradients[0], gradients[1]);
}

TEST(Models, InferenceKeepsNoActivations) {
  // Mode::Eval forward frees each activation after its last reader: once its output is dropped, the tensors in use
  // are what they were before it (parameters, gradients), also right after a training step. On the
  // old code every layer kept its input or output, about the whole forward's activations.
  for (const std::string name : {"cosmoflow", "unet3d", "resnet50"}) {
    ModelOptions o;
    o.batch = 2;  // batch norm's statistics need more than one value per channel at ResNet-50's 1 x 1 end
    o.input_size = name == "unet3d" ? 64 : 32;
    o.input_depth = name == "unet3d" ? 32 : 0;
    o.classes = name == "resnet50" ? 10 : 0;
    auto m = build_model(name, test_backend(), o);
    Rng rng(5);
    const Tensor x = random_tensor(m->input_shape(), rng);
    m->backward(m->forward(x, Mode::Train));  // a training step's dy: any tensor of the output's shape
    const std::size_t before = Storage::host_bytes_in_use();
    m->forward(x, Mode::Eval);
    EXPECT_EQ(Storage::host_bytes_in_use(), before) << name;
    m->forward(x, Mode::Train);  // a step the loss guard rolls back: no backward comes
    m->forward(x, Mode::Eval);
    EXPECT_EQ(Storage::host_bytes_in_use(), before) << name << ": inference after a training forward without backward";
    // Backward after an inference forward is refused: it kept nothing to compute the gradients from.
    EXPECT_THROW(m->backward(m->forward(x, Mode::Eval)), std::logic_error) << name;
  }
}

TEST(Models, ResNet50ForwardBackwardSmall) {
  auto m = build("resnet50", 32, 5, 2);
  Rng rng(1);
  Tensor x = random_tensor(m->input_shape(), rng);
  LossResult l = softmax_cross_entropy(m->forward(x, Mode::Train), {1, 3}, 0.1f);
  EXPECT_TRUE(std::isfinite(l.loss));
  Tensor dx = m->backward(l.gradient);
  EXPECT_EQ(dx.shape(), m->input_shape());
  double norm = 0;
  for (std::size_t i = 0; i < m->parameters().parameter_count(); ++i) norm += std::fabs(m->parameters().gradients()[i]);
  EXPECT_GT(norm, 0);
  EXPECT_TRUE(std::isfinite(norm));
}

}  // namespace
}  // namespace fanstore::trainer::testing
