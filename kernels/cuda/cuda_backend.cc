// CudaBackend: construction, the stream and id-error plumbing, memory, GEMM, elementwise ops,
// reductions and AdamW, f32 or 8-bit state (the GPT layer methods are in cuda_backend_layers.cc).
#include "kernels/cuda/cuda_backend.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cuda/arg_checks.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch.h"
#include "kernels/quantize.h"

namespace baton {

std::unique_ptr<Backend> MakeCudaBackend(MemoryLedger& ledger, int device_index,
                                         cuda::CudaBackendOptions options) {
  return std::make_unique<cuda::CudaBackend>(ledger, device_index, options);
}

std::unique_ptr<Backend> MakeCudaMetaBackend(MemoryLedger& ledger, int device_index,
                                             cuda::CudaBackendOptions options) {
  return std::make_unique<cuda::CudaMetaBackend>(ledger, device_index, options);
}

namespace cuda {
namespace {

void CheckSameShape(const Tensor& a, const Tensor& b, const char* name_a, const char* name_b) {
  BATON_CHECK(a.shape() == b.shape(), "{} {} and {} {} differ in shape", name_a, a.ToString(),
              name_b, b.ToString());
}

// Throws unless `device` is a GPU that exists.
int CheckedDeviceIndex(int device_index) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  BATON_CHECK(count > 0, "no CUDA device: {}", why);
  BATON_CHECK(device_index >= 0 && device_index < count,
              "CUDA device {} does not exist: this machine has {}", device_index, count);
  return device_index;
}

}  // namespace

int CudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) {
      *why = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(status),
                         cudaGetErrorName(status));
    }
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
  return count;
}

CudaBackend::CudaBackend(MemoryLedger& ledger, int device_index, CudaBackendOptions options)
    : index_(CheckedDeviceIndex(device_index)),
      options_(options),
      allocator_(std::make_unique<CachingAllocator>(ledger, MakeCudaMemoryProvider(device_index))) {
  BATON_CUDA_CHECK(cudaSetDevice(index_));
  BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  id_error_buffer_ = Workspace(static_cast<int64_t>(sizeof(IdError) / 4), DType::kI32);
  id_error_ = static_cast<IdError*>(id_error_buffer_.raw());
  BATON_CUDA_CHECK(cudaMemsetAsync(id_error_, 0, sizeof(IdError), stream_));
  const auto words = static_cast<int64_t>((options_.gemm_workspace_bytes + 3) / 4);
  gemm_workspace_ = Workspace(words, DType::kF32);
  gemm_ = std::make_unique<CublasLtGemm>(gemm_workspace_.raw(), gemm_workspace_.nbytes(),
                                         options_.allow_tf32, options_.force_cublas);
}

CudaBackend::CudaBackend(std::unique_ptr<MetaAllocator> allocator, int device_index,
                         CudaBackendOptions options)
    : index_(device_index), options_(options), allocator_(std::move(allocator)) {
  BATON_CHECK(device_index >= 0, "CUDA device {} does not exist", device_index);
  // What the real constructor books: the id-error record and the cuBLASLt workspace.
  id_error_buffer_ = Workspace(static_cast<int64_t>(sizeof(IdError) / 4), DType::kI32);
  gemm_workspace_ =
      Workspace(static_cast<int64_t>((options_.gemm_workspace_bytes + 3) / 4), DType::kF32);
}

CudaMetaBackend::CudaMetaBackend(MemoryLedger& ledger, int device_index, CudaBackendOptions options)
    : CudaBackend(std::make_unique<MetaAllocator>(ledger, Device::Cuda(device_index)), device_index,
                  options) {}

CachingAllocator& CudaBackend::caching_allocator() {
  auto* caching = dynamic_cast<CachingAllocator*>(allocator_.get());
  BATON_CHECK(caching != nullptr, "a meta CUDA backend has no caching allocator");
  return *caching;
}

CudaBackend::~CudaBackend() {
  if (stream_ == nullptr) {  // a meta backend: nothing was queued
    gemm_workspace_ = Tensor();
    id_error_buffer_ = Tensor();
    return;
  }
  // Destruction can't throw: statuses are ignored. Queued work finishes before anything goes.
  cudaSetDevice(index_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  gemm_.reset();
  gemm_workspace_ = Tensor();
  id_error_buffer_ = Tensor();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::Activate() const {
  Compute([&] {
    int current = -1;
    BATON_CUDA_CHECK(cudaGetDevice(&current));
    if (current != index_) BATON_CUDA_CHECK(cudaSetDevice(index_));
  });
}

Tensor CudaBackend::Workspace(int64_t elements, DType dtype) {
  return Tensor::Empty(*allocator_, {elements}, dtype, MemCategory::kWorkspace);
}

Tensor CudaBackend::Cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor cast = Workspace(t.numel(), dtype).View(t.shape());
  Compute([&] { LaunchCast(t.raw(), t.dtype(), cast.raw(), dtype, t.numel(), stream_); });
  return cast;
}

void CudaBackend::SyncAndCheck() {
  Compute([&] {
    Activate();
    IdError error{};
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(&error, id_error_, sizeof(IdError), cudaMemcpyDeviceToHost, stream_));
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (error.set != 0) {
      BATON_CUDA_CHECK(cudaMemsetAsync(id_error_, 0, sizeof(IdError), stream_));  // report once
      BATON_FAIL(
          "an id is out of range: element {} of a token/target tensor is {}, outside [0, {}) "
          "(found by a kernel queued before this call)",
          error.index, error.value, error.bound);
    }
  });
}

void CudaBackend::Synchronize() { SyncAndCheck(); }

void CudaBackend::Zero(Tensor& t) {
  Activate();
  CheckOnDevice(t, device(), "t");
  Compute([&] {
    if (t.nbytes() > 0) BATON_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  });
}

void CudaBackend::Copy(const Tensor& src, Tensor& dst) {
  Activate();
  for (const auto& [t, name] : {std::pair{&src, "src"}, {&dst, "dst"}}) {
    BATON_CHECK(t->defined(), "{} is undefined", name);
    BATON_CHECK(t->device().is_cpu() || t->device() == device(), "{} {} is on {}, not {} or cpu",
                name, t->ToString(), t->device().ToString(), device().ToString());
    BATON_CHECK(t->is_contiguous(), "{} {} is not contiguous", name, t->ToString());
  }
  CheckSameShape(src, dst, "src", "dst");
  const bool host_src = src.device().is_cpu();
  const bool host_dst = dst.device().is_cpu();
  if (host_src && host_dst) {
    CopyHost(src, dst);
    return;
  }
  const bool converts = src.dtype() != dst.dtype();
  BATON_CHECK(!converts || (IsFloating(src.dtype()) && IsFloating(dst.dtype())),
              "cannot copy {} into {}", src.ToString(), dst.ToString());
  Tensor staged;  // a device copy in the other dtype, alive until the transfer is done
  if (converts && (host_src || host_dst)) {
    staged = Workspace(src.numel(), host_src ? src.dtype() : dst.dtype());
  }
  Compute([&] {
    const int64_t n = src.numel();
    if (!converts) {
      if (src.raw() == dst.raw() || src.nbytes() == 0) return;
      BATON_CUDA_CHECK(
          cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, stream_));
    } else if (!host_src && !host_dst) {
      LaunchCast(src.raw(), src.dtype(), dst.raw(), dst.dtype(), n, stream_);
    } else if (host_src) {  // upload as it is, convert on the device
      BATON_CUDA_CHECK(
          cudaMemcpyAsync(staged.raw(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice, stream_));
      LaunchCast(staged.raw(), src.dtype(), dst.raw(), dst.dtype(), n, stream_);
    } else {  // convert on the device, download
      LaunchCast(src.raw(), src.dtype(), staged.raw(), dst.dtype(), n, stream_);
      BATON_CUDA_CHECK(
          cudaMemcpyAsync(dst.raw(), staged.raw(), dst.nbytes(), cudaMemcpyDeviceToHost, stream_));
    }
    // Host memory is the caller's again only once the transfer is done.
    if (host_src || host_dst) SyncAndCheck();
  });
}

void CudaBackend::RunMatmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                            Tensor& out, bool accumulate, const Tensor* bias) {
  const RowsCols am = AsMatrix(a, "a");
  const RowsCols bm = AsMatrix(b, "b");
  const RowsCols om = AsMatrix(out, "out");
  Tensor bias_cast;
  if (bias != nullptr) bias_cast = Cast(*bias, out.dtype());
  GemmProblem p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.m = om.rows;
  p.n = om.cols;
  p.k = trans_a ? am.rows : am.cols;
  p.a = {a.raw(), a.dtype(), am.cols, 0};
  p.b = {b.raw(), b.dtype(), bm.cols, 0};
  p.out = out.raw();
  p.out_dtype = out.dtype();
  p.ldo = om.cols;
  p.beta = accumulate ? 1.0f : 0.0f;
  p.bias = bias != nullptr ? bias_cast.raw() : nullptr;
  Compute([&] { gemm_->Run(p, stream_); });
}

void CudaBackend::Matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
                         bool accumulate, const Tensor* bias) {
  Activate();
  CheckFloat(a, device(), "a");
  CheckFloat(b, device(), "b");
  CheckFloat(out, device(), "out");
  const RowsCols am = AsMatrix(a, "a");
  const RowsCols bm = AsMatrix(b, "b");
  const RowsCols om = AsMatrix(out, "out");
  const int64_t m = trans_a ? am.cols : am.rows;
  const int64_t k = trans_a ? am.rows : am.cols;
  const int64_t n = trans_b ? bm.rows : bm.cols;
  BATON_CHECK(k == (trans_b ? bm.cols : bm.rows),
              "Matmul: op(a) of {} has {} columns but op(b) of {} has {} rows", a.ToString(), k,
              b.ToString(), trans_b ? bm.cols : bm.rows);
  BATON_CHECK(om.rows == m && om.cols == n, "Matmul: out {} must be ({}, {})", out.ToString(), m,
              n);
  BATON_CHECK(out.raw() != a.raw() && out.raw() != b.raw(), "Matmul: out aliases an input");
  if (bias != nullptr) {
    CheckFloat(*bias, device(), "bias");
    CheckNumel(*bias, n, "bias");
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(a) op(b) is zero
    if (!accumulate) Zero(out);
    if (bias != nullptr) {
      Compute([&] {
        LaunchBroadcastRows(bias->raw(), bias->dtype(), out.raw(), out.dtype(), m, n,
                            /*accumulate=*/true, stream_);
      });
    }
    return;
  }
  if (CublasLtGemm::Supports(a.dtype(), b.dtype(), out.dtype())) {
    RunMatmul(a, trans_a, b, trans_b, out, accumulate, bias);
    return;
  }
  // Any other mix of dtypes: stage through f32 (inputs, bias, and out when it isn't f32).
  const Tensor a32 = Cast(a, DType::kF32);
  const Tensor b32 = Cast(b, DType::kF32);
  Tensor bias32;
  if (bias != nullptr) bias32 = Cast(*bias, DType::kF32);
  const Tensor* bias_arg = bias != nullptr ? &bias32 : nullptr;
  if (out.dtype() == DType::kF32) {
    RunMatmul(a32, trans_a, b32, trans_b, out, accumulate, bias_arg);
    return;
  }
  Tensor out32 = accumulate ? Cast(out, DType::kF32) : Workspace(out.numel(), DType::kF32);
  out32 = out32.View(out.shape());
  RunMatmul(a32, trans_a, b32, trans_b, out32, accumulate, bias_arg);
  Compute(
      [&] { LaunchCast(out32.raw(), DType::kF32, out.raw(), out.dtype(), out.numel(), stream_); });
}

void CudaBackend::BiasBackward(const Tensor& dout, Tensor& dbias) {
  Activate();
  CheckFloat(dout, device(), "dout");
  CheckFloat(dbias, device(), "dbias");
  const RowsCols dm = AsMatrix(dout, "dout");
  CheckNumel(dbias, dm.cols, "dbias");
  Tensor partials = Workspace(ColumnSumsPartials(dm.rows, dm.cols), DType::kF32);
  Compute([&] {
    LaunchColumnSums(dout.raw(), dout.dtype(), dm.rows, dm.cols,
                     static_cast<float*>(partials.raw()), dbias.raw(), dbias.dtype(), stream_);
  });
}

void CudaBackend::Add(const Tensor& a, const Tensor& b, Tensor& out) {
  Activate();
  CheckFloat(a, device(), "a");
  CheckFloat(b, device(), "b");
  CheckFloat(out, device(), "out");
  CheckSameShape(a, out, "a", "out");
  CheckSameShape(b, out, "b", "out");
  Compute([&] {
    LaunchAdd(a.raw(), a.dtype(), b.raw(), b.dtype(), out.raw(), out.dtype(), out.numel(), stream_);
  });
}

void CudaBackend::Accumulate(const Tensor& x, Tensor& acc) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(acc, device(), "acc");
  CheckSameShape(x, acc, "x", "acc");
  Compute(
      [&] { LaunchAccumulate(x.raw(), x.dtype(), acc.raw(), acc.dtype(), acc.numel(), stream_); });
}

void CudaBackend::Scale(Tensor& t, float factor) {
  Activate();
  CheckFloat(t, device(), "t");
  Compute([&] { LaunchScale(t.raw(), t.dtype(), factor, t.numel(), stream_); });
}

void CudaBackend::ApplyMask(Tensor& t, const Tensor& mask) {
  Activate();
  CheckFloat(t, device(), "t");
  CheckU8(mask, device(), "mask");
  CheckSameShape(t, mask, "t", "mask");
  Compute([&] {
    LaunchApplyMask(t.raw(), t.dtype(), static_cast<const uint8_t*>(mask.raw()), t.numel(),
                    stream_);
  });
}

void CudaBackend::DequantizeInt8(const Tensor& q, const Tensor& scale, Tensor& out) {
  Activate();
  CheckI8(q, device(), "q");
  CheckF32(scale, device(), "scale");
  CheckFloat(out, device(), "out");
  CheckInt8WeightShapes(q, scale, out);
  Compute([&] {
    LaunchDequantizeInt8(static_cast<const int8_t*>(q.raw()),
                         static_cast<const float*>(scale.raw()), out.raw(), out.dtype(), q.size(0),
                         q.size(1), stream_);
  });
}

double CudaBackend::SumOfSquares(const Tensor& t) {
  Activate();
  CheckFloat(t, device(), "t");
  const int64_t blocks = SumOfSquaresBlocks(t.numel());
  // One double for the total, then one per block (two f32 slots each).
  Tensor scratch = Workspace(2 * (blocks + 1), DType::kF32);
  double result = 0.0;  // the meta backend's: nothing is summed
  Compute([&] {
    double* total = static_cast<double*>(scratch.raw());
    LaunchSumOfSquares(t.raw(), t.dtype(), t.numel(), total + 1, total, stream_);
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    SyncAndCheck();
  });
  return result;
}

bool CudaBackend::AllFinite(const Tensor& t) {
  Activate();
  CheckFloat(t, device(), "t");
  Tensor flag = Workspace(1, DType::kI32);
  int32_t bad = 0;  // the meta backend's answer: nothing is read
  Compute([&] {
    BATON_CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, sizeof(int32_t), stream_));
    LaunchNonFiniteFlag(t.raw(), t.dtype(), t.numel(), static_cast<int*>(flag.raw()), stream_);
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(&bad, flag.raw(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    SyncAndCheck();
  });
  return bad == 0;
}

namespace {

// AdamW's per-call scalars as the CPU backend (and PyTorch) forms them: in double, then used as
// float.
AdamWScalars ScalarsOf(const AdamWConfig& config, float grad_scale) {
  const auto step = static_cast<double>(config.step);
  AdamWScalars s;
  s.beta1 = config.beta1;
  s.beta2 = config.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  s.decay = static_cast<float>(1.0 - static_cast<double>(config.lr) * config.weight_decay);
  s.step_size =
      static_cast<float>(config.lr / (1.0 - std::pow(static_cast<double>(config.beta1), step)));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(config.beta2), step)));
  s.eps = config.eps;
  s.grad_scale = grad_scale;
  return s;
}

}  // namespace

void CudaBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const AdamWConfig& config, float grad_scale) {
  Activate();
  CheckF32(param, device(), "param");
  CheckFloat(grad, device(), "grad");
  CheckF32(m, device(), "m");
  CheckF32(v, device(), "v");
  CheckSameShape(param, grad, "param", "grad");
  CheckSameShape(param, m, "param", "m");
  CheckSameShape(param, v, "param", "v");
  BATON_CHECK(config.step >= 1, "AdamW step is 1-based, got {}", config.step);
  Compute([&] {
    LaunchAdamW(static_cast<float*>(param.raw()), grad.raw(), grad.dtype(),
                static_cast<float*>(m.raw()), static_cast<float*>(v.raw()), param.numel(),
                ScalarsOf(config, grad_scale), stream_);
  });
}

void CudaBackend::AdamW8bit(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_absmax,
                            Tensor& v, Tensor& v_absmax, const AdamWConfig& config,
                            float grad_scale) {
  Activate();
  CheckF32(param, device(), "param");
  CheckFloat(grad, device(), "grad");
  CheckU8(m, device(), "m");
  CheckU8(v, device(), "v");
  CheckF32(m_absmax, device(), "m_absmax");
  CheckF32(v_absmax, device(), "v_absmax");
  CheckSameShape(param, grad, "param", "grad");
  CheckSameShape(param, m, "param", "m");
  CheckSameShape(param, v, "param", "v");
  CheckQuantBlocks(param, m_absmax, v_absmax);
  BATON_CHECK(config.step >= 1, "AdamW step is 1-based, got {}", config.step);
  Compute([&] {
    LaunchAdamW8bit(static_cast<float*>(param.raw()), grad.raw(), grad.dtype(),
                    static_cast<uint8_t*>(m.raw()), static_cast<float*>(m_absmax.raw()),
                    static_cast<uint8_t*>(v.raw()), static_cast<float*>(v_absmax.raw()),
                    param.numel(), ScalarsOf(config, grad_scale), stream_);
  });
}

}  // namespace cuda
}  // namespace baton
