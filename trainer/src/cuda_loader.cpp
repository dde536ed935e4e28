// Finding, loading and calling the CUDA backend module (cuda_loader.hpp, cuda/module_abi.h).
#include "cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cuda/cuda_backend.hpp"  // CudaBackendOptions' defaults only: a header without CUDA, no link dependency
#include "cuda/module_abi.h"
#include "fanstore/beside_program.hpp"

// Where an install puts the module relative to the program (cmake/FanStoreInstall.cmake: from
// CMAKE_INSTALL_BINDIR to CMAKE_INSTALL_LIBDIR, e.g. ../lib or ../lib64), as for `fanstore run`'s
// preload library.
#ifndef FANSTORE_CUDA_MODULE_FROM_BIN
#define FANSTORE_CUDA_MODULE_FROM_BIN "../lib"
#endif

namespace fanstore::trainer::cuda_module {
namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

struct Module {
  std::string error;  // empty when loaded
  fanstore_trainer_cuda_device_count_fn device_count = nullptr;
  fanstore_trainer_cuda_make_backend_fn make_backend = nullptr;
  fanstore_trainer_cuda_make_nccl_communicator_fn make_nccl_communicator = nullptr;
};

Module load() {
  Module m;
  const std::vector<std::string> paths =
      PathsBesideProgram(FANSTORE_TRAINER_CUDA_MODULE_FILE, FANSTORE_CUDA_MODULE_FROM_BIN);
  std::string path;
  for (const auto& p : paths)
    if (access(p.c_str(), F_OK) == 0) {
      path = p;
      break;
    }
  if (path.empty()) {
    std::string looked;
    for (const auto& p : paths) looked += (looked.empty() ? "" : ", ") + p;
    m.error =
        "the CUDA backend module " FANSTORE_TRAINER_CUDA_MODULE_FILE
        " is not installed next to this program (looked for " +
        (looked.empty() ? std::string("it, but /proc/self/exe is unreadable") : looked) +
        "): install it with the program (cmake --install, or the fanstore .deb) or build it (cmake --build BUILD)";
    return m;
  }
  // RTLD_NOW: a symbol the module needs and this program lacks is an error here, not a crash later.
  // Never dlclose()d: the CUDA libraries it loaded do not support being unloaded.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    std::string why = one_line(e ? e : "dlopen failed");
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // dlerror often starts with the path
    std::string hint = "reinstall FanStore";
    if (why.find("cannot open shared object file") != std::string::npos)
      hint =
          "the CUDA runtime, cuBLAS, cuDNN and NCCL it was built with must be installed here (or on LD_LIBRARY_PATH)";
    else if (why.find("undefined symbol") != std::string::npos)
      hint =
          "this program does not export the trainer functions the module needs (fanstore_trainer_cuda_host in "
          "trainer/CMakeLists.txt), or the module is from another build";
    m.error = "cannot load the CUDA backend module " + path + ": " + why + " (" + hint + ")";
    return m;
  }
  const auto version =
      reinterpret_cast<fanstore_trainer_cuda_abi_version_fn>(dlsym(handle, "fanstore_trainer_cuda_abi_version"));
  if (!version) {
    m.error =
        path + " is not a FanStore CUDA backend module (no fanstore_trainer_cuda_abi_version): reinstall FanStore";
    return m;
  }
  if (const std::uint32_t v = version(); v != FANSTORE_TRAINER_CUDA_ABI_VERSION) {
    m.error = "the CUDA backend module " + path + " has ABI version " + std::to_string(v) + ", this program needs " +
              std::to_string(FANSTORE_TRAINER_CUDA_ABI_VERSION) +
              ": it comes from another FanStore build; install the program and its module from the same build";
    return m;
  }
  m.device_count =
      reinterpret_cast<fanstore_trainer_cuda_device_count_fn>(dlsym(handle, "fanstore_trainer_cuda_device_count"));
  m.make_backend =
      reinterpret_cast<fanstore_trainer_cuda_make_backend_fn>(dlsym(handle, "fanstore_trainer_cuda_make_backend"));
  m.make_nccl_communicator = reinterpret_cast<fanstore_trainer_cuda_make_nccl_communicator_fn>(
      dlsym(handle, "fanstore_trainer_cuda_make_nccl_communicator"));
  if (!m.device_count || !m.make_backend || !m.make_nccl_communicator)
    m.error = "the CUDA backend module " + path + " lacks an entry point of ABI version " +
              std::to_string(FANSTORE_TRAINER_CUDA_ABI_VERSION) + ": reinstall FanStore";
  return m;
}

const Module& module() {
  static const Module m = load();  // once per process, thread-safe
  return m;
}

const Module& loaded_module() {
  const Module& m = module();
  if (!m.error.empty()) throw std::runtime_error(m.error);
  return m;
}

}  // namespace

bool nvidia_device_plausible() {
  for (const char* path : {"/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg"})
    if (access(path, F_OK) == 0) return true;
  return false;
}

const std::string& load_error() { return module().error; }

int device_count(std::string* reason) {
  char why[1024] = "";
  const int devices = loaded_module().device_count(why, sizeof why);
  if (reason) *reason = one_line(why);
  return devices;
}

std::shared_ptr<Backend> make_cuda_backend(int device, Precision precision) {
  const cuda::CudaBackendOptions defaults;
  const fanstore_trainer_cuda_options options{device, static_cast<int>(precision), defaults.channels_last,
                                              defaults.deterministic ? 1 : 0};
  std::shared_ptr<Backend> backend;
  char error[2048] = "";
  if (loaded_module().make_backend(&options, &backend, error, sizeof error) != 0)
    throw std::runtime_error(one_line(error));
  return backend;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend) {
  std::unique_ptr<Communicator> communicator;
  char error[2048] = "";
  if (loaded_module().make_nccl_communicator(&host, &backend, &communicator, error, sizeof error) != 0)
    throw std::runtime_error(one_line(error));
  return communicator;
}

}  // namespace fanstore::trainer::cuda_module
