// Tensor storage semantics, the parameter arena and the tensor exchange file.
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "trainer/backend.hpp"
#include "trainer/parameters.hpp"
#include "trainer/tensor.hpp"
#include "trainer/tensor_file.hpp"

namespace fanstore::trainer {
namespace {

TEST(Tensor, ShallowCopiesShareCloneDoesNot) {
  Tensor a = Tensor::zeros({2, 3, 4, 5});
  EXPECT_EQ(a.numel(), 120);
  EXPECT_EQ(a.capacity(), 120u);
  EXPECT_TRUE(a.is_plain());
  Tensor b = a;
  b[7] = 3.f;
  EXPECT_EQ(a[7], 3.f);
  Tensor c = a.clone();
  c[7] = 1.f;
  EXPECT_EQ(a[7], 3.f);
  EXPECT_EQ(a.reshaped({2, 60})[7], 3.f);
  EXPECT_THROW(a.reshaped({7}), std::invalid_argument);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Shape, Helpers) {
  Shape s{2, 3, 4, 5, 6};
  EXPECT_EQ(s.spatial_rank(), 3);
  EXPECT_EQ(s.spatial_size(), 120);
  EXPECT_EQ(s.to_string(), "(2, 3, 4, 5, 6)");
}

TEST(ParameterTable, OneArenaWithNamedViews) {
  ParameterTable t;
  auto w = t.declare_parameter("conv.weight", {4, 3, 3, 3});  // 108 floats at offset 0
  auto b = t.declare_parameter("conv.bias", {4});             // 4 floats at offset 108
  auto m = t.declare_buffer("bn.running_mean", {4});
  EXPECT_THROW(t.declare_parameter("conv.bias", {4}), std::invalid_argument);
  EXPECT_THROW(t.value(w), std::logic_error);
  auto backend = make_cpu_backend({1});
  t.finalize(*backend);
  EXPECT_EQ(t.parameter_count(), 112u);
  EXPECT_EQ(t.buffer_count(), 4u);
  t.value(b)[2] = 5.f;
  EXPECT_EQ(t.values()[110], 5.f);  // the view is the arena
  t.gradient(w)[0] = 1.f;
  EXPECT_EQ(t.gradients()[0], 1.f);
  t.buffer(m)[1] = 2.f;
  EXPECT_EQ(t.buffer_values()[1], 2.f);
  EXPECT_THROW(t.declare_parameter("late", {1}), std::logic_error);
}

TEST(TensorFile, RoundTripAndErrors) {
  const auto path = (std::filesystem::temp_directory_path() / "fanstore_trainer_tensor_file_test.bin").string();
  std::vector<NamedTensor> in{{"a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {1}, {-7.5f}}};
  write_tensor_file(path, in);
  auto out = read_tensor_file(path);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "a.weight");
  EXPECT_EQ(out[0].shape, (Shape{2, 3}));
  EXPECT_EQ(out[0].data, in[0].data);
  EXPECT_EQ(find_tensor(out, "b").data[0], -7.5f);
  EXPECT_THROW(find_tensor(out, "c"), std::runtime_error);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  std::fputc('X', f);
  std::fclose(f);
  EXPECT_THROW(read_tensor_file(path), std::runtime_error);
  std::filesystem::remove(path);
}

TEST(TensorFile, ExportImportState) {
  auto backend = make_cpu_backend({1});
  ParameterTable a, b;
  for (auto* t : {&a, &b}) {
    t->declare_parameter("w", {2, 2});
    t->declare_buffer("r", {2});
    t->finalize(*backend);
  }
  for (int i = 0; i < 4; ++i) a.values()[i] = static_cast<float>(i + 1);
  a.buffer_values()[1] = 9.f;
  import_state(b, export_state(a));
  EXPECT_EQ(b.values()[3], 4.f);
  EXPECT_EQ(b.buffer_values()[1], 9.f);
}

}  // namespace
}  // namespace fanstore::trainer
