// Mixed-precision host logic (the dynamic loss scaler) and backend selection (--device, the
// node-local rank, the one-line refusal of --device cuda without a GPU).
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "trainer/device_selection.hpp"
#include "trainer/precision.hpp"

namespace fanstore::trainer {
namespace {

TEST(Precision, NamesAndTypes) {
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(activation_dtype(Precision::FP16), DType::F16);
  EXPECT_EQ(activation_dtype(Precision::FP32), DType::F32);
  EXPECT_STREQ(precision_name(Precision::BF16), "bf16");
  EXPECT_THROW(parse_precision("fp8"), std::invalid_argument);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScaler::Options o;
  o.initial_scale = 1024.f;
  o.growth_interval = 3;
  LossScaler s(true, o);
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_FALSE(s.update(false));  // overflow: skip the step, halve
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_EQ(s.skipped_steps(), 1u);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.f);  // two good steps: not yet
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.f);  // the third in a row doubles it
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow resets the run of good steps
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.f);
}

TEST(LossScaler, ClampsAndDisabledNeverSkips) {
  LossScaler::Options o;
  o.initial_scale = 2.f;
  o.min_scale = 1.f;
  o.max_scale = 4.f;
  o.growth_interval = 1;
  LossScaler s(true, o);
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1.f);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 4.f);
  LossScaler off(false);
  EXPECT_EQ(off.scale(), 1.f);
  EXPECT_TRUE(off.update(false));  // bf16/fp32: non-finite gradients are the loss guard's business
  EXPECT_EQ(off.skipped_steps(), 0u);
  o.backoff_factor = 1.5f;
  EXPECT_THROW(LossScaler(true, o), std::invalid_argument);
}

TEST(DeviceSelection, ParsesChoicesAndTheNodeLocalRank) {
  EXPECT_EQ(parse_device_choice("cuda"), DeviceChoice::Cuda);
  EXPECT_THROW(parse_device_choice("gpu"), std::invalid_argument);
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                        "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID"})
    unsetenv(v);
  EXPECT_EQ(node_local_rank(), -1);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(node_local_rank(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);  // Open MPI's wins: it is the launcher of this rank
  EXPECT_EQ(node_local_rank(), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // garbage is skipped
  EXPECT_EQ(node_local_rank(), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

// The objects mapped into this process whose path contains `name`.
std::string mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) found += line.substr(line.rfind(' ') + 1) + " ";
  return found;
}

TEST(DeviceSelection, CpuAlwaysAutoFallsBackCudaRefusesInOneLine) {
  EXPECT_EQ(make_backend({DeviceChoice::Cpu, 1})->device(), Device::Host);
  if (!nvidia_device_plausible()) {
    // No NVIDIA driver here: auto is the CPU without loading the CUDA module or any CUDA library.
    EXPECT_EQ(make_backend({DeviceChoice::Auto, 1})->device(), Device::Host);
    for (const char* lib : {"libfanstore-trainer-cuda", "libcudart", "libcudnn", "libcublas", "libnccl"})
      EXPECT_EQ(mapped(lib), "") << lib << " is mapped after a CPU-only --device auto";
  }
  const CudaAvailability cuda = cuda_availability();  // loads the module in a CUDA build
  std::cout << "CUDA backend built: " << cuda.built << ", devices: " << cuda.devices
            << (cuda.reason.empty() ? "" : ", reason: " + cuda.reason) << "\n";
  EXPECT_FALSE(cuda.module_error) << "this test program cannot load the CUDA module: " << cuda.reason;
  // (Without a driver a module that does not load is "no CUDA device", not module_error: look at the words too.)
  EXPECT_EQ(cuda.reason.find("CUDA backend module"), std::string::npos) << cuda.reason;
  if (cuda.built) {
    EXPECT_NE(mapped("libfanstore-trainer-cuda.so"), "") << "cuda_availability() did not load the module";
  }
  if (cuda.built && cuda.devices > 0) {
    EXPECT_EQ(make_backend({DeviceChoice::Auto, 1})->device(), Device::Cuda);
    return;
  }
  EXPECT_EQ(make_backend({DeviceChoice::Auto, 1})->device(), Device::Host);  // no GPU: auto is the CPU
  try {
    make_backend({DeviceChoice::Cuda, 1});
    FAIL() << "--device cuda without a device must be refused";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find(cuda.built ? "no CUDA device" : "built without the CUDA backend"), std::string::npos) << what;
    EXPECT_NE(what.find("--device cpu"), std::string::npos) << what;
  }
  EXPECT_THROW(make_backend({DeviceChoice::Cpu, 1, Precision::BF16}), std::invalid_argument);
}

}  // namespace
}  // namespace fanstore::trainer
