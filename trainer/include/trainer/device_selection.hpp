// Which backend a run computes on: --device auto|cpu|cuda, the GPU a rank takes (by its node-local
// rank), and a one-line reason when CUDA was asked for and cannot be had.
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/precision.hpp"

namespace fanstore::trainer {

enum class DeviceChoice { Auto, Cpu, Cuda };

// "auto", "cpu" or "cuda"; throws std::invalid_argument naming the choices otherwise.
DeviceChoice parse_device_choice(const std::string& name);

struct BackendChoice {
  DeviceChoice device = DeviceChoice::Auto;
  int threads = 0;                        // CPU: OpenMP threads (0 = OMP_NUM_THREADS)
  Precision precision = Precision::FP32;  // CUDA: activation type; the CPU backend computes in fp32 only
  int local_rank = -1;                    // CUDA: node-local rank picking the GPU; -1 = node_local_rank()
};

// Whether this build has the CUDA backend, how many devices the runtime sees, and when none, why
// (the text of cudaGetDeviceCount's error, e.g. no driver on this machine). The backend is a module,
// libfanstore-trainer-cuda.so, that only this asks to be loaded (dlopen, once per process): CPU runs
// never map cudart, cuDNN, cuBLAS or NCCL. `module_error`: it could not be loaded (not installed next
// to the program, dlopen's error, another ABI version) on a machine with an NVIDIA driver, which `reason` says
// with what to do: an installation problem, not a machine without a GPU. Without a driver there is no device
// either way: `reason` then says both (a bundle unpacked on a CPU node, without the CUDA libraries).
struct CudaAvailability {
  bool built = false;
  int devices = 0;
  std::string reason;
  bool module_error = false;
};
// Load: always ask the module (--device cuda, the conformance suite). IfNvidiaDevice: load it only
// when nvidia_device_plausible(), else report no device without loading anything (--device auto).
enum class CudaProbe { Load, IfNvidiaDevice };
CudaAvailability cuda_availability(CudaProbe probe = CudaProbe::Load);

// Whether this machine may have an NVIDIA GPU, decided without loading any library: the driver's
// /dev/nvidiactl or /proc/driver/nvidia, or WSL's /dev/dxg. False means no CUDA device for sure.
bool nvidia_device_plausible();

// The rank's index on its node from the launcher's environment (Open MPI, MVAPICH, MPICH/Intel MPI,
// Slurm srun, Cray PALS, Flux); -1 when not started by one of them.
int node_local_rank();
// The number of ranks on this node, from the same launchers' environment (Open MPI, MVAPICH,
// MPICH/Intel MPI, Slurm srun with --ntasks-per-node); -1 when none says.
int node_local_ranks();

// auto: CUDA when built and a device is present, else the CPU (without loading the CUDA module when
// nvidia_device_plausible() is false; with a one-line warning on stderr when it is true but the
// module cannot be loaded). cuda without a device (or in a build without CUDA, or when the module
// cannot be loaded) throws std::runtime_error with one line saying why and what to do instead.
// A precision other than fp32 on the CPU throws std::invalid_argument.
std::shared_ptr<Backend> make_backend(const BackendChoice& choice);

// The communicator for device memory: NCCL between the GPUs of a CUDA run on several ranks (gradient
// bucket sums on their own stream, overlapped with backward; the grid's halo messages and spatial
// sums; its split() gives NCCL sub-communicators), otherwise null: use `host` itself. Host memory
// given to it still goes through `host`.
std::unique_ptr<Communicator> make_device_communicator(Communicator& host, Backend& backend);

}  // namespace fanstore::trainer
