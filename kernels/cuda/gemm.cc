// CublasLtGemm: descriptors, the per-problem algorithm cache, and the call (see gemm.h).
#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("GEMM on {} tensors", Name(dtype));
}

// The largest power of two (at most 256) dividing the address: cuBLASLt assumes 256-byte
// alignment unless told, and views (Slice) can start anywhere.
uint32_t AlignmentOf(uintptr_t address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// Alignment of every matrix in a batch: the base pointer's and the stride's.
uint32_t MatrixAlignment(const void* data, int64_t batch_stride, DType dtype, int batch) {
  uint32_t alignment = AlignmentOf(reinterpret_cast<uintptr_t>(data));
  if (batch > 1) {
    const auto stride_bytes = static_cast<uintptr_t>(batch_stride) * SizeOf(dtype);
    alignment = std::min(alignment, AlignmentOf(stride_bytes == 0 ? 256 : stride_bytes));
  }
  return alignment;
}

template <typename T>
void SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  BATON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void SetLayout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
               const T& value) {
  BATON_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

template <typename T>
void SetPreference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute,
                   const T& value) {
  BATON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
}

cublasLtMatrixLayout_t MakeLayout(DType dtype, int64_t rows, int64_t cols, int64_t ld, int batch,
                                  int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  BATON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &layout, CudaType(dtype), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    SetLayout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{batch});
    SetLayout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
  }
  return layout;
}

// Everything the chosen algorithm depends on.
std::string PlanKey(const GemmProblem& p) {
  return fmt::format(
      "{}{} {}x{}x{} a{}:{}:{}:{} b{}:{}:{}:{} o{}:{}:{}:{} batch{} bias{}:{}",
      p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N', p.m, p.n, p.k, Name(p.a.dtype), p.a.ld,
      p.a.batch_stride, MatrixAlignment(p.a.data, p.a.batch_stride, p.a.dtype, p.batch),
      Name(p.b.dtype), p.b.ld, p.b.batch_stride,
      MatrixAlignment(p.b.data, p.b.batch_stride, p.b.dtype, p.batch), Name(p.out_dtype), p.ldo,
      p.out_batch_stride, MatrixAlignment(p.out, p.out_batch_stride, p.out_dtype, p.batch), p.batch,
      p.bias != nullptr, p.bias != nullptr ? AlignmentOf(reinterpret_cast<uintptr_t>(p.bias)) : 0);
}

}  // namespace

CublasLtGemm::CublasLtGemm(void* workspace, size_t workspace_bytes, bool allow_tf32,
                           bool force_cublas)
    : workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      allow_tf32_(allow_tf32),
      force_cublas_(force_cublas) {
  BATON_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  // Destruction can't throw: statuses are ignored here.
  for (auto& [key, plan] : plans_) {
    if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c != nullptr) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.op != nullptr) cublasLtMatmulDescDestroy(plan.op);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
  if (blas_ != nullptr) cublasDestroy(blas_);
}

bool CublasLtGemm::Supports(DType a, DType b, DType out) {
  if (a != b) return false;
  switch (a) {
    case DType::kF32:
      return out == DType::kF32;
    case DType::kBF16:
    case DType::kF16:
      return out == a || out == DType::kF32;
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      return false;
  }
  return false;
}

CublasLtGemm::Plan CublasLtGemm::MakePlan(const GemmProblem& p) {
  Plan plan;
  if (force_cublas_) {
    plan.use_lt = false;
    return plan;
  }
  const bool tf32 = allow_tf32_ && p.a.dtype == DType::kF32;
  BATON_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &plan.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // out^T = op(b)^T op(a)^T in column-major terms: cuBLAS's A is our b, its B our a.
  const cublasOperation_t op_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  SetDesc(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  SetDesc(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (p.bias != nullptr) {
    SetDesc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    SetDesc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            static_cast<int32_t>(CudaType(p.out_dtype)));
    SetDesc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  }
  plan.a = MakeLayout(p.b.dtype, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.b.ld, p.batch,
                      p.b.batch_stride);
  plan.b = MakeLayout(p.a.dtype, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.a.ld, p.batch,
                      p.a.batch_stride);
  plan.c = MakeLayout(p.out_dtype, p.n, p.m, p.ldo, p.batch, p.out_batch_stride);

  cublasLtMatmulPreference_t pref = nullptr;
  BATON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  try {
    SetPreference(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{workspace_bytes_});
    SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                  MatrixAlignment(p.b.data, p.b.batch_stride, p.b.dtype, p.batch));
    SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                  MatrixAlignment(p.a.data, p.a.batch_stride, p.a.dtype, p.batch));
    const uint32_t out_alignment = MatrixAlignment(p.out, p.out_batch_stride, p.out_dtype, p.batch);
    SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, out_alignment);
    SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, out_alignment);
    // NOT_SUPPORTED means no algorithm for this configuration, like returning none.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &returned);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
      BATON_CUBLAS_CHECK(status);
    } else {
      returned = 0;
    }
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (returned > 0) {
    plan.algo = result.algo;
  } else {
    spdlog::debug("cuBLASLt has no algorithm for GEMM {}: using cuBLAS", PlanKey(p));
    plan.use_lt = false;
  }
  return plan;
}

CublasLtGemm::Plan& CublasLtGemm::PlanFor(const GemmProblem& p) {
  const std::string key = PlanKey(p);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, MakePlan(p)).first;
  return it->second;
}

void CublasLtGemm::Run(const GemmProblem& p, cudaStream_t stream) {
  BATON_CHECK(p.m > 0 && p.n > 0 && p.k > 0 && p.batch >= 1, "GEMM of an empty problem {}",
              PlanKey(p));
  BATON_CHECK(Supports(p.a.dtype, p.b.dtype, p.out_dtype), "GEMM {} x {} -> {} is not supported",
              Name(p.a.dtype), Name(p.b.dtype), Name(p.out_dtype));
  Plan& plan = PlanFor(p);
  if (!plan.use_lt) {
    RunCublas(p, stream);
    return;
  }
  if (p.bias != nullptr) SetDesc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  BATON_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &p.alpha, p.b.data, plan.a, p.a.data, plan.b,
                                    &p.beta, p.out, plan.c, p.out, plan.c, &plan.algo, workspace_,
                                    workspace_bytes_, stream));
}

// The same product through cuBLAS (column-major, as above). cuBLAS has no bias epilogue: the bias
// is broadcast into out first (added to it when accumulating), then beta = 1.
void CublasLtGemm::RunCublas(const GemmProblem& p, cudaStream_t stream) {
  if (blas_ == nullptr) {
    BATON_CUBLAS_CHECK(cublasCreate(&blas_));
    BATON_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
  }
  BATON_CUBLAS_CHECK(cublasSetStream(blas_, stream));
  float beta = p.beta;
  if (p.bias != nullptr) {
    BATON_CHECK(p.batch == 1, "GEMM bias with a batch of {}", p.batch);
    LaunchBroadcastRows(p.bias, p.out_dtype, p.out, p.out_dtype, p.m, p.n, p.beta != 0.0f, stream);
    beta = 1.0f;
  }
  const bool tf32 = allow_tf32_ && p.a.dtype == DType::kF32;
  BATON_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      blas_, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, p.n, p.m,
      p.k, &p.alpha, p.b.data, CudaType(p.b.dtype), p.b.ld, p.b.batch_stride, p.a.data,
      CudaType(p.a.dtype), p.a.ld, p.a.batch_stride, &beta, p.out, CudaType(p.out_dtype), p.ldo,
      p.out_batch_stride, p.batch, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace baton::cuda
