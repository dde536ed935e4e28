// Fully connected layer on cuBLASLt (y = x W^T + b), fp32 accumulation; the heuristic's algorithm
// is cached per (operation, shape, type, operand alignment). Row-major tensors are read as their column-major
// transposes, so every product below is written for column-major matrices.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layout_helpers.hpp"

namespace fanstore::trainer::cuda {
namespace {

cudaDataType_t blas_type(DType type) {
  switch (type) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F64: break;
  }
  throw std::invalid_argument("cuBLASLt: unsupported dtype");
}

// One column-major matrix layout (rows x cols, leading dimension = rows).
class MatrixLayout {
 public:
  MatrixLayout(DType type, std::int64_t rows, std::int64_t cols) {
    FS_CHECK(cublasLtMatrixLayoutCreate(&l_, blas_type(type), static_cast<std::uint64_t>(rows),
                                        static_cast<std::uint64_t>(cols), rows));
  }
  ~MatrixLayout() { cublasLtMatrixLayoutDestroy(l_); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
  cublasLtMatrixLayout_t get() const { return l_; }

 private:
  cublasLtMatrixLayout_t l_ = nullptr;
};

class CublasLtInnerProduct final : public InnerProductKernel {
 public:
  CublasLtInnerProduct(bool bias, Backend& backend, std::shared_ptr<CudaContext> ctx)
      : bias_(bias), backend_(backend), ctx_(std::move(ctx)) {}

  Tensor forward(const Tensor& x_any, const Tensor& w, const Tensor* b, Mode mode) override {
    const Tensor x = plain_activation(x_any);
    if (x.shape().rank() != 2 || w.shape().rank() != 2 || w.shape()[1] != x.shape()[1])
      throw std::invalid_argument("linear: input " + x.shape().to_string() + " does not match weight " +
                                  w.shape().to_string() + " (flatten first)");
    const std::int64_t n = x.shape()[0], cin = x.shape()[1], cout = w.shape()[0];
    x_ = mode == Mode::Train ? x : Tensor();
    const Tensor wk = backend_.cast(w, x.dtype());
    Tensor y = backend_.zeros(Shape{n, cout}, x.dtype());
    // y^T (cout x n) = W^T-as-stored (cin x cout), transposed, times x^T (cin x n).
    matmul("fwd", wk, x.dtype(), cin, cout, true, x, x.dtype(), cin, n, false, y, x.dtype(), cout, n, cin);
    if (bias_) {
      if (!b) throw std::invalid_argument("linear: a bias was declared but none was given");
      kernels::add_channel_bias(y.dtype(), y.raw(), b->data(), n, cout, 1, false, ctx_->stream());
    }
    return y;
  }

  Tensor backward_data(const Tensor& dy_any, const Tensor& w) override {
    const Tensor dy = plain_activation(dy_any);
    const std::int64_t n = dy.shape()[0], cout = dy.shape()[1], cin = w.shape()[1];
    const Tensor wk = backend_.cast(w, dy.dtype());
    Tensor dx = backend_.zeros(Shape{n, cin}, dy.dtype());
    // dx^T (cin x n) = W-as-stored (cin x cout) times dy^T (cout x n).
    matmul("bwd-data", wk, dy.dtype(), cin, cout, false, dy, dy.dtype(), cout, n, false, dx, dy.dtype(), cin, n, cout);
    return dx;
  }

  void backward_weights(const Tensor&, const Tensor& dy_any, Tensor& dw, Tensor* db) override {
    if (!x_.defined()) throw std::logic_error("linear: backward_weights needs a forward in Mode::Train first");
    const Tensor x = std::move(x_);  // freed stream-ordered, after the product below
    const Tensor dy = plain_activation(dy_any);
    const std::int64_t n = dy.shape()[0], cout = dy.shape()[1], cin = x.shape()[1];
    // dW^T (cin x cout) = x^T (cin x n) times (dy^T (cout x n)) transposed; written as F32 into the
    // arena whatever the activation type (cuBLASLt takes half inputs with a float output).
    matmul("bwd-weights", x, x.dtype(), cin, n, false, dy, dy.dtype(), cout, n, true, dw, DType::F32, cin, cout, n);
    if (bias_) {
      if (!db) throw std::invalid_argument("linear: a bias was declared but no bias gradient was given");
      kernels::channel_sums(dy.dtype(), dy.raw(), db->data(), n, cout, 1, false, ctx_->stream());
    }
  }

 private:
  Tensor plain_activation(const Tensor& t) { return backend_.to_plain(backend_.cast(t, ctx_->activation_type())); }

  // D (m x n) = op(A) op(B), column-major; A stored (a_rows x a_cols), B stored (b_rows x b_cols).
  void matmul(const char* what, const Tensor& a, DType a_type, std::int64_t a_rows, std::int64_t a_cols, bool a_t,
              const Tensor& b, DType b_type, std::int64_t b_rows, std::int64_t b_cols, bool b_t, const Tensor& d,
              DType d_type, std::int64_t m, std::int64_t n, std::int64_t k) {
    cublasLtMatmulDesc_t op = nullptr;
    FS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = a_t ? CUBLAS_OP_T : CUBLAS_OP_N, tb = b_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    FS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    FS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    MatrixLayout la(a_type, a_rows, a_cols), lb(b_type, b_rows, b_cols), ld(d_type, m, n);
    // The heuristic's first choice, cached per shape, type and operand alignment (the same every step).
    // cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise.
    const std::uint32_t align_a = alignment_of(a.raw(), 256), align_b = alignment_of(b.raw(), 256),
                        align_d = alignment_of(d.raw(), 256);
    const auto key = std::make_tuple(std::string(what), m, n, k, static_cast<int>(a_type), static_cast<int>(d_type),
                                     align_a, align_b, align_d);
    auto it = algorithms_.find(key);
    if (it == algorithms_.end()) {
      cublasLtMatmulPreference_t pref = nullptr;
      FS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const std::size_t limit = std::size_t{64} << 20;
      FS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit));
      for (auto [attribute, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}})
        FS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx_->cublaslt(), op, la.get(), lb.get(), ld.get(),
                                                                   ld.get(), pref, 1, &result, &count);
      cublasLtMatmulPreferenceDestroy(pref);
      if (status == CUBLAS_STATUS_SUCCESS && count == 0) {
        cublasLtMatmulDescDestroy(op);
        throw CudaError(std::string("cublasLtMatmulAlgoGetHeuristic: no algorithm for the ") + what + " product");
      }
      if (status != CUBLAS_STATUS_SUCCESS) cublasLtMatmulDescDestroy(op);
      check(status, "cublasLtMatmulAlgoGetHeuristic");
      it = algorithms_.emplace(key, result).first;
    }
    const float one = 1.f, zero = 0.f;
    void* ws = it->second.workspaceSize ? ctx_->workspace(it->second.workspaceSize) : nullptr;
    const cublasStatus_t status = cublasLtMatmul(ctx_->cublaslt(), op, &one, a.raw(), la.get(), b.raw(), lb.get(),
                                                 &zero, d.raw(), ld.get(), const_cast<void*>(d.raw()), ld.get(),
                                                 &it->second.algo, ws, it->second.workspaceSize, ctx_->stream());
    cublasLtMatmulDescDestroy(op);
    check(status, "cublasLtMatmul");
  }

  bool bias_;
  Backend& backend_;
  std::shared_ptr<CudaContext> ctx_;
  Tensor x_;
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, int, int, std::uint32_t, std::uint32_t,
                      std::uint32_t>,
           cublasLtMatmulHeuristicResult_t>
      algorithms_;
};

}  // namespace

std::unique_ptr<InnerProductKernel> make_cublaslt_inner_product(bool bias, Backend& backend,
                                                                std::shared_ptr<CudaContext> ctx) {
  return std::make_unique<CublasLtInnerProduct>(bias, backend, std::move(ctx));
}

}  // namespace fanstore::trainer::cuda
