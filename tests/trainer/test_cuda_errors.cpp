// The CUDA backend's error translation, run in a CUDA build with or without a GPU: every CUDA,
// cuDNN, cuBLAS and NCCL status becomes one line naming the call and the library's own words.
#include <gtest/gtest.h>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_check.hpp"

namespace fanstore::trainer::cuda {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CudaError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaErrors, EveryLibraryStatusIsOneLineNamingTheCall) {
  EXPECT_EQ(message_of([] { check(cudaErrorInvalidValue, "cudaMalloc(&p, 4)"); }),
            "cudaMalloc: cudaErrorInvalidValue (invalid argument)");
  const std::string cudnn = message_of([] { check(CUDNN_STATUS_BAD_PARAM, "cudnnConvolutionForward(h, &one, x)"); });
  EXPECT_EQ(cudnn.rfind("cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM", 0), 0u) << cudnn;
  const std::string blas = message_of([] { check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul(h, op)"); });
  EXPECT_EQ(blas.rfind("cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED", 0), 0u) << blas;
  const std::string nccl = message_of([] { check(ncclInvalidArgument, "ncclAllReduce(a, b)"); });
  EXPECT_EQ(nccl.rfind("ncclAllReduce: ", 0), 0u) << nccl;
  for (const auto& m : {cudnn, blas, nccl}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(message_of([] { check(cudaSuccess, "cudaFree(p)"); }), "");
  // A kernel's fault surfaces at a later call: the message says so rather than blame that call.
  const std::string fault = message_of([] { check(cudaErrorIllegalAddress, "cudaStreamSynchronize(s)"); });
  EXPECT_EQ(fault.rfind("cudaStreamSynchronize: cudaErrorIllegalAddress (", 0), 0u) << fault;
  EXPECT_NE(fault.find("CUDA_LAUNCH_BLOCKING=1"), std::string::npos) << fault;
  EXPECT_EQ(call_name("::cudaSetDevice(device_)"), "cudaSetDevice");
  EXPECT_EQ(call_name("cudnnCreate (&h)"), "cudnnCreate");
}

TEST(CudaErrors, NoDeviceIsAReasonNotACrash) {
  std::string reason;
  const int devices = device_count(&reason);
  if (devices > 0) GTEST_SKIP() << devices << " CUDA device(s) here: the no-device path is not reachable";
  EXPECT_EQ(reason.rfind("cudaGetDeviceCount: ", 0), 0u) << reason;
  // Creating the backend anyway fails in one line naming the first call that needs a device.
  const std::string m = message_of([] { make_cuda_backend({}); });
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  std::cout << "without a device: " << reason << "; make_cuda_backend: " << m << "\n";
}

}  // namespace
}  // namespace fanstore::trainer::cuda
