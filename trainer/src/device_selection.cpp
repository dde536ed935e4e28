// Backend selection: --device parsing, the node-local rank, CUDA availability and the factory. The
// CUDA backend is reached only through cuda_loader.hpp (the module libfanstore-trainer-cuda.so).
#include "trainer/device_selection.hpp"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <stdexcept>

#include "cuda_loader.hpp"

namespace fanstore::trainer {

DeviceChoice parse_device_choice(const std::string& name) {
  if (name == "auto") return DeviceChoice::Auto;
  if (name == "cpu") return DeviceChoice::Cpu;
  if (name == "cuda") return DeviceChoice::Cuda;
  throw std::invalid_argument("unknown device '" + name + "' (expected auto, cpu or cuda)");
}

CudaAvailability cuda_availability(CudaProbe probe) {
  CudaAvailability a;
#ifdef FANSTORE_CUDA_MODULE
  a.built = true;
  if (probe == CudaProbe::IfNvidiaDevice && !cuda_module::nvidia_device_plausible()) {
    a.reason = "no NVIDIA driver on this machine (no /dev/nvidiactl, /proc/driver/nvidia or /dev/dxg)";
    return a;
  }
  if (const std::string& error = cuda_module::load_error(); !error.empty()) {
    // Without a driver there is no device whatever the module does (a bundle unpacked on a CPU node, without the
    // CUDA libraries): that is "no CUDA device", with the module's words; with a driver it is the module's fault.
    a.module_error = cuda_module::nvidia_device_plausible();
    a.reason = a.module_error ? error : "no NVIDIA driver on this machine, and " + error;
    return a;
  }
  a.devices = cuda_module::device_count(&a.reason);
#else
  (void)probe;
  a.reason =
      "this fanstore-train was built without the CUDA backend (FANSTORE_CUDA=OFF, or no nvcc/cuDNN/NCCL at configure "
      "time)";
#endif
  return a;
}

bool nvidia_device_plausible() { return cuda_module::nvidia_device_plausible(); }

namespace {

// The first of the launcher variables `names` that holds a number in [min, 2^20); -1 when none does.
int launcher_number(std::initializer_list<const char*> names, long min) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (*end == '\0' && n >= min && n < (1 << 20)) return static_cast<int>(n);
  }
  return -1;
}

}  // namespace

int node_local_rank() {
  return launcher_number({"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                          "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID"},
                         0);
}

int node_local_ranks() {
  return launcher_number(
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1);
}

std::shared_ptr<Backend> make_backend(const BackendChoice& choice) {
  if (choice.device != DeviceChoice::Cpu) {
    const CudaAvailability cuda =
        cuda_availability(choice.device == DeviceChoice::Auto ? CudaProbe::IfNvidiaDevice : CudaProbe::Load);
    if (cuda.built && cuda.devices > 0) {
      const int local = choice.local_rank >= 0 ? choice.local_rank : std::max(0, node_local_rank());
      // One rank per GPU (ranks sharing one: NCCL refuses them, and the NCCL communicator says what to do).
      return cuda_module::make_cuda_backend(local % cuda.devices, choice.precision);
    }
    if (choice.device == DeviceChoice::Cuda)
      throw std::runtime_error(
          "--device cuda: " +
          (cuda.built && !cuda.module_error ? "no CUDA device (" + cuda.reason + ")" : cuda.reason) +
          "; use --device cpu or --device auto");
    // A machine with an NVIDIA driver whose CUDA module is broken: say so rather than quietly train
    // on the CPU, then do what auto promises.
    if (cuda.module_error)
      std::cerr << "fanstore-train: warning: --device auto: " << cuda.reason << "; running on the CPU\n";
  }
  if (choice.precision != Precision::FP32)
    throw std::invalid_argument(std::string("--precision ") + precision_name(choice.precision) +
                                " needs a CUDA device: the CPU backend computes in fp32");
  return make_cpu_backend({choice.threads});
}

std::unique_ptr<Communicator> make_device_communicator(Communicator& host, Backend& backend) {
  if (host.size() < 2 || backend.device() != Device::Cuda) return nullptr;
  // A CUDA backend exists, so make_backend() loaded the module.
  return cuda_module::make_nccl_communicator(host, backend);
}

}  // namespace fanstore::trainer
