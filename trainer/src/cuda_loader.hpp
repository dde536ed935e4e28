// The CUDA backend as a module loaded on demand: libfanstore-trainer-cuda.so holds src/cuda/ and is
// linked against cudart, cuDNN, cuBLAS(Lt) and NCCL; fanstore-train itself needs none of them, so a
// CPU run maps none of them. device_selection.cpp is the only user.
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/precision.hpp"

namespace fanstore::trainer::cuda_module {

// Whether this machine may have an NVIDIA GPU, decided without loading anything: the driver's
// /dev/nvidiactl or /proc/driver/nvidia, or WSL's /dev/dxg. False means "no CUDA device" for sure.
bool nvidia_device_plausible();

// Loads the module once per process (dlopen, RTLD_NOW, never unloaded) and checks its ABI version.
// Empty when it is loaded; otherwise one line naming the path(s) looked at and what went wrong
// (missing, dlopen's error, another ABI version) and what to do.
const std::string& load_error();

// The module's functions; call only when load_error() is empty. Errors thrown inside the module
// come back as std::runtime_error with the same text.
int device_count(std::string* reason);
std::shared_ptr<Backend> make_cuda_backend(int device, Precision precision);
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend);

}  // namespace fanstore::trainer::cuda_module
