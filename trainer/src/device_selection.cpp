// Backend selection: --device parsing, the node-local rank, CUDA availability and the factory.
#include "trainer/device_selection.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#ifdef FANSTORE_WITH_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace fanstore::trainer {

DeviceChoice parse_device_choice(const std::string& name) {
  if (name == "auto") return DeviceChoice::Auto;
  if (name == "cpu") return DeviceChoice::Cpu;
  if (name == "cuda") return DeviceChoice::Cuda;
  throw std::invalid_argument("unknown device '" + name + "' (expected auto, cpu or cuda)");
}

CudaAvailability cuda_availability() {
  CudaAvailability a;
#ifdef FANSTORE_WITH_CUDA
  a.built = true;
  a.devices = cuda::device_count(&a.reason);
#else
  a.reason = "this fanstore-train was built without the CUDA backend (FANSTORE_CUDA=OFF, or no nvcc/cuDNN/NCCL at configure time)";
#endif
  return a;
}

int node_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                           "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID"}) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0 && rank < (1 << 20)) return static_cast<int>(rank);
  }
  return -1;
}

std::shared_ptr<Backend> make_backend(const BackendChoice& choice) {
  if (choice.device != DeviceChoice::Cpu) {
    const CudaAvailability cuda = cuda_availability();
    if (cuda.built && cuda.devices > 0) {
#ifdef FANSTORE_WITH_CUDA
      cuda::CudaBackendOptions o;
      const int local = choice.local_rank >= 0 ? choice.local_rank : std::max(0, node_local_rank());
      o.device = local % cuda.devices;  // one rank per GPU; ranks beyond the GPU count share round robin
      o.precision = choice.precision;
      return cuda::make_cuda_backend(o);
#endif
    }
    if (choice.device == DeviceChoice::Cuda)
      throw std::runtime_error("--device cuda: " + std::string(cuda.built ? "no CUDA device (" + cuda.reason + ")" : cuda.reason) +
                               "; use --device cpu or --device auto");
  }
  if (choice.precision != Precision::FP32)
    throw std::invalid_argument(std::string("--precision ") + precision_name(choice.precision) +
                                " needs a CUDA device: the CPU backend computes in fp32");
  return make_cpu_backend({choice.threads});
}

std::unique_ptr<Communicator> make_device_communicator(Communicator& host, Backend& backend) {
  if (host.size() < 2 || backend.device() != Device::Cuda) return nullptr;
#ifdef FANSTORE_WITH_CUDA
  return cuda::make_nccl_communicator(host, backend);
#else
  return nullptr;
#endif
}

}  // namespace fanstore::trainer
