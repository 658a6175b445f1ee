// CudaBackend: the Llama layer methods (RMSNorm, SwiGLU, rotary embeddings, the key/value repeat
// of grouped-query attention). Each validates its arguments as the CPU backend does
// (kernels/cpu/cpu_backend_llama.cc) and queues the kernels of llama.cu. Only RMSNorm's backward
// needs workspace (its dweight partials); in meta mode every method validates and books that, and
// queues nothing.
#include "core/error.h"
#include "kernels/cuda/arg_checks.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

// The head size of qkv (B,T,(NH+2KVH)D) for `heads`, checked.
int64_t QkvHeadDim(const Tensor& qkv, const AttentionHeads& heads, Device device,
                   const char* name) {
  CheckFloat(qkv, device, name);
  BATON_CHECK(qkv.dim() == 3, "{} {} must be (B, T, (NH + 2 KVH) D)", name, qkv.ToString());
  BATON_CHECK(heads.query >= 1 && heads.kv >= 1 && heads.query % heads.kv == 0,
              "{} key/value heads must divide {} query heads", heads.kv, heads.query);
  const int64_t columns = heads.query + 2 * int64_t{heads.kv};
  BATON_CHECK(qkv.size(2) % columns == 0, "{} {} does not hold {} + 2 x {} heads", name,
              qkv.ToString(), heads.query, heads.kv);
  return qkv.size(2) / columns;
}

// The hidden size H of gate_up (N,2H), checked.
int64_t SwiGluHidden(const Tensor& gate_up, Device device) {
  CheckFloat(gate_up, device, "gate_up");
  const RowsCols gm = AsMatrix(gate_up, "gate_up");
  BATON_CHECK(gm.cols % 2 == 0, "gate_up {} must have an even number of columns (gate, up)",
              gate_up.ToString());
  return gm.cols / 2;
}

}  // namespace

void CudaBackend::RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                                 Tensor& rstd) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(weight, device(), "weight");
  CheckFloat(out, device(), "out");
  CheckF32(rstd, device(), "rstd");
  BATON_CHECK(eps > 0.0f, "RMSNorm eps must be positive, got {}", eps);
  const RowsCols xm = AsMatrix(x, "x");
  CheckNumel(weight, xm.cols, "weight");
  CheckShape(out, x.shape(), "out");
  CheckNumel(rstd, xm.rows, "rstd");
  Compute([&] {
    LaunchRmsNormForward(x.raw(), x.dtype(), weight.raw(), weight.dtype(), eps, out.raw(),
                         out.dtype(), static_cast<float*>(rstd.raw()), xm.rows, xm.cols, stream_);
  });
}

void CudaBackend::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                  const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  Activate();
  for (const auto& [t, name] : {std::pair{&dout, "dout"},
                                {&x, "x"},
                                {&weight, "weight"},
                                {&dx, "dx"},
                                {&dweight, "dweight"}}) {
    CheckFloat(*t, device(), name);
  }
  CheckF32(rstd, device(), "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(dweight, xm.cols, "dweight");
  CheckNumel(rstd, xm.rows, "rstd");
  Tensor partials = Workspace(ColumnSumsPartials(xm.rows, xm.cols), DType::kF32);
  Compute([&] {
    LaunchRmsNormBackward(dout.raw(), dout.dtype(), x.raw(), x.dtype(), weight.raw(),
                          weight.dtype(), static_cast<const float*>(rstd.raw()), dx.raw(),
                          dx.dtype(), dweight.raw(), dweight.dtype(),
                          static_cast<float*>(partials.raw()), xm.rows, xm.cols, stream_);
  });
}

void CudaBackend::SwiGluForward(const Tensor& gate_up, Tensor& out) {
  Activate();
  const int64_t hidden = SwiGluHidden(gate_up, device());
  CheckFloat(out, device(), "out");
  Shape shape = gate_up.shape();
  shape.back() = hidden;
  CheckShape(out, shape, "out");
  Compute([&] {
    LaunchSwiGluForward(gate_up.raw(), gate_up.dtype(), out.raw(), out.dtype(),
                        AsMatrix(gate_up, "gate_up").rows, hidden, stream_);
  });
}

void CudaBackend::SwiGluBackward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) {
  Activate();
  const int64_t hidden = SwiGluHidden(gate_up, device());
  CheckFloat(dout, device(), "dout");
  CheckFloat(dgate_up, device(), "dgate_up");
  Shape shape = gate_up.shape();
  shape.back() = hidden;
  CheckShape(dout, shape, "dout");
  CheckShape(dgate_up, gate_up.shape(), "dgate_up");
  Compute([&] {
    LaunchSwiGluBackward(gate_up.raw(), gate_up.dtype(), dout.raw(), dout.dtype(), dgate_up.raw(),
                         dgate_up.dtype(), AsMatrix(gate_up, "gate_up").rows, hidden, stream_);
  });
}

// The inverse frequencies are made on the host (RopeInverseFrequency, the CPU's f32 values bit
// for bit) and passed in the launch's parameters: no workspace, no copy.
void CudaBackend::RotaryEmbedding(Tensor& qkv, const Tensor& segment_starts, int64_t start,
                                  const AttentionHeads& heads, const RopeConfig& rope,
                                  bool inverse) {
  Activate();
  const int64_t dim = QkvHeadDim(qkv, heads, device(), "qkv");
  BATON_CHECK(dim % 2 == 0, "rotary embeddings need an even head size, got {}", dim);
  BATON_CHECK(dim <= kRopeMaxHeadDim, "rotary embeddings on CUDA take head sizes up to {}, got {}",
              kRopeMaxHeadDim, dim);
  BATON_CHECK(rope.theta > 0.0, "rope theta must be positive, got {}", rope.theta);
  const int64_t batch = qkv.size(0), seq = qkv.size(1);
  BATON_CHECK(start >= 0 && (start == 0 || !segment_starts.defined()),
              "rotary start {} must be non-negative, and 0 with packed documents", start);
  const int32_t* segments = nullptr;
  if (segment_starts.defined()) {
    CheckI32(segment_starts, device(), "segment_starts");
    CheckShape(segment_starts, {batch, seq}, "segment_starts");
    segments = static_cast<const int32_t*>(segment_starts.raw());
  }
  Compute([&] {
    RopeFrequencies frequencies{};
    for (int64_t i = 0; i < dim / 2; ++i)
      frequencies.inv_freq[i] = RopeInverseFrequency(rope, i, dim);
    // The query and key heads are the first NH + KVH heads of a row.
    LaunchRotaryEmbedding(qkv.raw(), qkv.dtype(), segments, start, batch, seq, qkv.size(2),
                          heads.query + int64_t{heads.kv}, dim, frequencies, inverse, stream_);
  });
}

void CudaBackend::RepeatKv(const Tensor& qkv, const AttentionHeads& heads, Tensor& out) {
  Activate();
  const int64_t dim = QkvHeadDim(qkv, heads, device(), "qkv");
  CheckFloat(out, device(), "out");
  BATON_CHECK(out.dtype() == qkv.dtype(), "out {} must have qkv's dtype {}", out.ToString(),
              Name(qkv.dtype()));
  CheckShape(out, {qkv.size(0), qkv.size(1), 3 * heads.query * dim}, "out");
  Compute([&] {
    LaunchRepeatKv(qkv.raw(), out.raw(), qkv.dtype(), qkv.size(0) * qkv.size(1), heads.query,
                   heads.kv, dim, stream_);
  });
}

void CudaBackend::CopyColumns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                              int64_t cols) {
  Activate();
  CheckOnDevice(src, device(), "src");
  CheckOnDevice(dst, device(), "dst");
  const ColumnCopy copy = CheckColumnCopy(src, src_col, dst, dst_col, cols);
  Compute([&] {
    if (copy.rows == 0 || cols == 0) return;
    const size_t element = SizeOf(src.dtype());
    BATON_CUDA_CHECK(cudaMemcpy2DAsync(
        static_cast<char*>(dst.raw()) + dst_col * element, copy.dst_cols * element,
        static_cast<const char*>(src.raw()) + src_col * element, copy.src_cols * element,
        cols * element, copy.rows, cudaMemcpyDeviceToDevice, stream_));
  });
}

void CudaBackend::RepeatKvBackward(const Tensor& dout, const AttentionHeads& heads, Tensor& dqkv) {
  Activate();
  const int64_t dim = QkvHeadDim(dqkv, heads, device(), "dqkv");
  CheckFloat(dout, device(), "dout");
  CheckShape(dout, {dqkv.size(0), dqkv.size(1), 3 * heads.query * dim}, "dout");
  Compute([&] {
    LaunchRepeatKvBackward(dout.raw(), dout.dtype(), dqkv.raw(), dqkv.dtype(),
                           dqkv.size(0) * dqkv.size(1), heads.query, heads.kv, dim, stream_);
  });
}

}  // namespace baton::cuda
