// CpuBackend: the Llama layer methods (RMSNorm, SwiGLU, rotary embeddings, the key/value repeat
// of grouped-query attention). Each validates its arguments and runs the row kernels of
// llama_kernels.h on rows in parallel; 16-bit rows go through the running thread's f32 buffers
// (PieceBuffers), as the GPT row kernels' do, so no f32 copy of an activation exists.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/f32_staging.h"
#include "kernels/cpu/layer_kernels.h"
#include "kernels/cpu/llama_kernels.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// The head size of qkv (B,T,(NH+2KVH)D) for `heads`, checked.
int64_t QkvHeadDim(const Tensor& qkv, const AttentionHeads& heads) {
  CheckFloat(qkv, "qkv");
  BATON_CHECK(qkv.dim() == 3, "qkv {} must be (B, T, (NH + 2 KVH) D)", qkv.ToString());
  BATON_CHECK(heads.query >= 1 && heads.kv >= 1 && heads.query % heads.kv == 0,
              "{} key/value heads must divide {} query heads", heads.kv, heads.query);
  const int64_t columns = heads.query + 2 * int64_t{heads.kv};
  BATON_CHECK(qkv.size(2) % columns == 0, "qkv {} does not hold {} + 2 x {} heads", qkv.ToString(),
              heads.query, heads.kv);
  return qkv.size(2) / columns;
}

// The hidden width H of gate_up (..., 2H), checked, and `half` checked to be (..., H).
int64_t CheckSwiGlu(const Tensor& gate_up, const Tensor& half, const char* half_name) {
  CheckFloat(gate_up, "gate_up");
  BATON_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "gate_up {} must have an even number of columns (gate, up)", gate_up.ToString());
  Shape shape = gate_up.shape();
  shape.back() /= 2;
  CheckShape(half, shape, half_name);
  return shape.back();
}

}  // namespace

void CpuBackend::RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                                Tensor& rstd) {
  CheckFloat(x, "x");
  CheckFloat(weight, "weight");
  CheckFloat(out, "out");
  CheckF32(rstd, "rstd");
  BATON_CHECK(eps > 0.0f, "RMSNorm eps must be positive, got {}", eps);
  const RowsCols xm = AsMatrix(x, "x");
  CheckNumel(weight, xm.cols, "weight");
  CheckShape(out, x.shape(), "out");
  CheckNumel(rstd, xm.rows, "rstd");
  const int64_t cols = xm.cols;
  Tensor buffers = PieceBuffers({&x, &out}, cols);
  F32Staging staging(*allocator_, &pool_);
  const float* pw = staging.In(weight);
  Compute([&] {
    float* prstd = rstd.data<float>();
    ParallelForWithSlot(xm.rows, &pool_, cols, [&](int64_t r, int slot) {
      const float* px = LoadChunk(x, r * cols, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      float* po = ChunkTarget(out, r * cols, PieceBuffer(buffers, slot, 2, 1, cols));
      prstd[r] = RmsNormForwardRow(px, pw, eps, po, cols);
      StoreChunk(po, out, r * cols, cols);
    });
  });
}

void CpuBackend::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  for (const auto& [t, name] : {std::pair{&dout, "dout"},
                                {&x, "x"},
                                {&weight, "weight"},
                                {&dx, "dx"},
                                {&dweight, "dweight"}}) {
    CheckFloat(*t, name);
  }
  CheckF32(rstd, "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(dweight, xm.cols, "dweight");
  CheckNumel(rstd, xm.rows, "rstd");
  const int64_t cols = xm.cols;
  const int64_t blocks = (xm.rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  const int64_t block_floats = kLayerNormRowBlock * cols;
  Tensor partials = Workspace(blocks * cols);
  Tensor buffers = PieceBuffers({&dout, &x, &dx}, block_floats);
  F32Staging staging(*allocator_, &pool_);
  const float* pw = staging.In(weight);
  float* pdw = staging.InOut(dweight);
  Compute([&] {
    const float* prstd = rstd.data<float>();
    ParallelForWithSlot(blocks, &pool_, block_floats, [&](int64_t block, int slot) {
      const int64_t r0 = block * kLayerNormRowBlock;
      const int64_t begin = r0 * cols;
      const int64_t n = std::min(xm.rows - r0, kLayerNormRowBlock) * cols;
      const float* pdout =
          LoadChunk(dout, begin, n, PieceBuffer(buffers, slot, 3, 0, block_floats));
      const float* px = LoadChunk(x, begin, n, PieceBuffer(buffers, slot, 3, 1, block_floats));
      float* pdx = LoadChunkInOut(dx, begin, n, PieceBuffer(buffers, slot, 3, 2, block_floats));
      RmsNormBackwardBlock(pdout, px, pw, prstd + r0, pdx, partials.data<float>() + block * cols,
                           n / cols, cols);
      StoreChunk(pdx, dx, begin, n);
    });
    RmsNormBackwardReduce(partials.data<float>(), blocks, pdw, cols, &pool_);
    staging.Commit();
  });
}

void CpuBackend::SwiGluForward(const Tensor& gate_up, Tensor& out) {
  CheckFloat(out, "out");
  const RowsCols gm = AsMatrix(gate_up, "gate_up");
  const int64_t hidden = CheckSwiGlu(gate_up, out, "out");
  Tensor buffers = PieceBuffers({&gate_up, &out}, gm.cols);
  Compute([&] {
    ParallelForWithSlot(gm.rows, &pool_, gm.cols, [&](int64_t r, int slot) {
      const float* pg =
          LoadChunk(gate_up, r * gm.cols, gm.cols, PieceBuffer(buffers, slot, 2, 0, gm.cols));
      float* po = ChunkTarget(out, r * hidden, PieceBuffer(buffers, slot, 2, 1, gm.cols));
      SwiGluForwardRow(pg, po, hidden);
      StoreChunk(po, out, r * hidden, hidden);
    });
  });
}

void CpuBackend::SwiGluBackward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) {
  CheckFloat(dout, "dout");
  CheckFloat(dgate_up, "dgate_up");
  const RowsCols gm = AsMatrix(gate_up, "gate_up");
  const int64_t hidden = CheckSwiGlu(gate_up, dout, "dout");
  CheckShape(dgate_up, gate_up.shape(), "dgate_up");
  Tensor buffers = PieceBuffers({&gate_up, &dout, &dgate_up}, gm.cols);
  Compute([&] {
    ParallelForWithSlot(gm.rows, &pool_, gm.cols, [&](int64_t r, int slot) {
      const float* pg =
          LoadChunk(gate_up, r * gm.cols, gm.cols, PieceBuffer(buffers, slot, 3, 0, gm.cols));
      const float* pdo =
          LoadChunk(dout, r * hidden, hidden, PieceBuffer(buffers, slot, 3, 1, gm.cols));
      float* pdg =
          LoadChunkInOut(dgate_up, r * gm.cols, gm.cols, PieceBuffer(buffers, slot, 3, 2, gm.cols));
      SwiGluBackwardRow(pg, pdo, pdg, hidden);
      StoreChunk(pdg, dgate_up, r * gm.cols, gm.cols);
    });
  });
}

void CpuBackend::RotaryEmbedding(Tensor& qkv, const Tensor& segment_starts, int64_t start,
                                 const AttentionHeads& heads, const RopeConfig& rope,
                                 bool inverse) {
  const int64_t dim = QkvHeadDim(qkv, heads);
  BATON_CHECK(dim % 2 == 0, "rotary embeddings need an even head size, got {}", dim);
  BATON_CHECK(rope.theta > 0.0, "rope theta must be positive, got {}", rope.theta);
  const int64_t batch = qkv.size(0), seq = qkv.size(1), cols = qkv.size(2);
  BATON_CHECK(start >= 0 && (start == 0 || !segment_starts.defined()),
              "rotary start {} must be non-negative, and 0 with packed documents", start);
  const int32_t* segments = nullptr;
  if (segment_starts.defined()) {
    CheckI32(segment_starts, "segment_starts");
    CheckShape(segment_starts, {batch, seq}, "segment_starts");
    if (!segment_starts.is_meta()) segments = segment_starts.data<int32_t>();
  }
  // The query and key heads are the first (NH + KVH) D columns of a row.
  const int64_t rotated = (heads.query + int64_t{heads.kv}) * dim;
  Tensor buffers = PieceBuffers({&qkv}, rotated);
  Compute([&] {
    const std::vector<float> inv_freq = RopeInverseFrequencies(rope, dim);
    ParallelForWithSlot(batch * seq, &pool_, rotated, [&](int64_t row, int slot) {
      const int64_t t = row % seq;
      const int64_t position = segments != nullptr ? t - segments[row] : start + t;
      float* px =
          LoadChunkInOut(qkv, row * cols, rotated, PieceBuffer(buffers, slot, 1, 0, rotated));
      RotateHeads(px, heads.query + heads.kv, dim, inv_freq.data(), position, inverse);
      StoreChunk(px, qkv, row * cols, rotated);
    });
  });
}

void CpuBackend::RepeatKv(const Tensor& qkv, const AttentionHeads& heads, Tensor& out) {
  const int64_t dim = QkvHeadDim(qkv, heads);
  CheckFloat(out, "out");
  BATON_CHECK(out.dtype() == qkv.dtype(), "out {} must have qkv's dtype {}", out.ToString(),
              Name(qkv.dtype()));
  const int64_t c = heads.query * dim;
  CheckShape(out, {qkv.size(0), qkv.size(1), 3 * c}, "out");
  Compute([&] {
    const int64_t rows = qkv.size(0) * qkv.size(1), in_cols = qkv.size(2);
    const int64_t group = heads.query / heads.kv;
    const size_t element = SizeOf(qkv.dtype());
    const char* src = static_cast<const char*>(qkv.raw());
    char* dst = static_cast<char*>(out.raw());
    ParallelFor(rows, &pool_, 3 * c, [&](int64_t r) {
      const char* in = src + r * in_cols * element;
      char* o = dst + r * 3 * c * element;
      std::memcpy(o, in, c * element);         // the queries
      for (int part = 1; part <= 2; ++part) {  // keys, then values
        const char* kv = in + (c + (part - 1) * heads.kv * dim) * element;
        for (int64_t h = 0; h < heads.query; ++h) {
          std::memcpy(o + (part * c + h * dim) * element, kv + (h / group) * dim * element,
                      dim * element);
        }
      }
    });
  });
}

void CpuBackend::CopyColumns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                             int64_t cols) {
  CheckHostContiguous(src, "src");
  CheckHostContiguous(dst, "dst");
  const ColumnCopy copy = CheckColumnCopy(src, src_col, dst, dst_col, cols);
  Compute([&] {
    const size_t element = SizeOf(src.dtype());
    const char* from = static_cast<const char*>(src.raw()) + src_col * element;
    char* to = static_cast<char*>(dst.raw()) + dst_col * element;
    ParallelFor(copy.rows, &pool_, cols, [&](int64_t r) {
      std::memcpy(to + r * copy.dst_cols * element, from + r * copy.src_cols * element,
                  static_cast<size_t>(cols) * element);
    });
  });
}

void CpuBackend::RepeatKvBackward(const Tensor& dout, const AttentionHeads& heads, Tensor& dqkv) {
  const int64_t dim = QkvHeadDim(dqkv, heads);
  CheckFloat(dout, "dout");
  const int64_t c = heads.query * dim;
  CheckShape(dout, {dqkv.size(0), dqkv.size(1), 3 * c}, "dout");
  const int64_t rows = dqkv.size(0) * dqkv.size(1), cols = dqkv.size(2);
  Tensor buffers = PieceBuffers({&dout, &dqkv}, 3 * c);
  Compute([&] {
    const int64_t group = heads.query / heads.kv;
    ParallelForWithSlot(rows, &pool_, 3 * c, [&](int64_t r, int slot) {
      const float* pd = LoadChunk(dout, r * 3 * c, 3 * c, PieceBuffer(buffers, slot, 2, 0, 3 * c));
      float* pq = LoadChunkInOut(dqkv, r * cols, cols, PieceBuffer(buffers, slot, 2, 1, 3 * c));
      for (int64_t i = 0; i < c; ++i) pq[i] += pd[i];
      for (int part = 1; part <= 2; ++part) {
        float* kv = pq + c + (part - 1) * heads.kv * dim;
        for (int64_t j = 0; j < heads.kv; ++j) {
          for (int64_t i = 0; i < dim; ++i) {
            float sum = 0.0f;
            for (int64_t h = j * group; h < (j + 1) * group; ++h) sum += pd[part * c + h * dim + i];
            kv[j * dim + i] += sum;
          }
        }
      }
      StoreChunk(pq, dqkv, r * cols, cols);
    });
  });
}

}  // namespace baton::cpu
