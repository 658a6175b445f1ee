// oneDNN matmul primitives, cached per problem and thread, or OpenBLAS sgemm, threaded by fixed
// blocks of c (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

using dnnl::memory;

// Everything a primitive is specialised for.
struct Problem {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType ab = DType::kF32;
  DType c = DType::kF32;
  bool operator==(const Problem&) const = default;
};

struct ProblemHash {
  size_t operator()(const Problem& p) const {
    uint32_t alpha_bits = 0;
    uint32_t beta_bits = 0;
    std::memcpy(&alpha_bits, &p.alpha, sizeof alpha_bits);
    std::memcpy(&beta_bits, &p.beta, sizeof beta_bits);
    size_t h = static_cast<size_t>(p.trans_a) | static_cast<size_t>(p.trans_b) << 1 |
               static_cast<size_t>(p.ab) << 2 | static_cast<size_t>(p.c) << 6;
    for (const uint64_t v :
         {static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.k),
          static_cast<uint64_t>(p.lda), static_cast<uint64_t>(p.ldb), static_cast<uint64_t>(p.ldc),
          static_cast<uint64_t>(alpha_bits), static_cast<uint64_t>(beta_bits)}) {
      h = (h ^ v) * 0x100000001b3ull;  // FNV-style mixing
    }
    return h;
  }
};

// A primitive with its argument memories, to which each call binds its pointers.
struct Prepared {
  dnnl::matmul primitive;
  memory a, b, c;
  std::unordered_map<int, memory> args;
};

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::data_type ToDnnl(DType dtype) {
  return dtype == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
}

dnnl::matmul::primitive_desc Describe(const Problem& p) {
  // op(a) is (m, k): a row-major (m, k) matrix, or the transpose of a row-major (k, m) one.
  const memory::dims a_strides = p.trans_a ? memory::dims{1, p.lda} : memory::dims{p.lda, 1};
  const memory::dims b_strides = p.trans_b ? memory::dims{1, p.ldb} : memory::dims{p.ldb, 1};
  const memory::desc a_md({p.m, p.k}, ToDnnl(p.ab), a_strides);
  const memory::desc b_md({p.k, p.n}, ToDnnl(p.ab), b_strides);
  const memory::desc c_md({p.m, p.n}, ToDnnl(p.c), memory::dims{p.ldc, 1});
  // alpha scales the f32 accumulator, then beta * c is added (the sum post-op), as in BLAS.
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
#if DNNL_VERSION_MAJOR >= 3  // Ubuntu 24.04's oneDNN: no output scales, no op descriptors
  // alpha as a scale of a (one value, bound at execution): an eltwise post-op before the sum
  // would send every alpha-and-beta problem to oneDNN's reference loop.
  if (p.alpha != 1.0f) attr.set_scales_mask(DNNL_ARG_SRC, 0);
  if (p.beta != 0.0f) ops.append_sum(p.beta);
  attr.set_post_ops(ops);
  return dnnl::matmul::primitive_desc(Engine(), a_md, b_md, c_md, attr);
#else
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.0f) ops.append_sum(p.beta);
  attr.set_post_ops(ops);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, Engine());
#endif
}

// Each thread's stream and primitives. oneDNN's threading is OpenMP: a team of one for every
// thread that calls it (the setting is per thread), so each call is single-threaded.
struct ThreadState {
  ThreadState() : stream((omp_set_num_threads(1), Engine())) {}
  dnnl::stream stream;
  std::unordered_map<Problem, Prepared, ProblemHash> cache;
};

ThreadState& ThisThread() {
  thread_local ThreadState state;
  return state;
}

// The calling thread's primitive for `p`, created on first use. Throws on a problem oneDNN
// cannot do, so the calling thread prepares every problem before handing blocks to the pool.
Prepared& Prepare(const Problem& p) {
  ThreadState& state = ThisThread();
  const auto found = state.cache.find(p);
  if (found != state.cache.end()) return found->second;
  // A process that multiplies very many shapes (attention at many lengths) starts over.
  if (state.cache.size() >= 4096) state.cache.clear();
  try {
    const dnnl::matmul::primitive_desc pd = Describe(p);
    Prepared prepared;
    prepared.primitive = dnnl::matmul(pd);
    prepared.a = memory(pd.src_desc(), Engine(), DNNL_MEMORY_NONE);
    prepared.b = memory(pd.weights_desc(), Engine(), DNNL_MEMORY_NONE);
    prepared.c = memory(pd.dst_desc(), Engine(), DNNL_MEMORY_NONE);
    prepared.args = {
        {DNNL_ARG_SRC, prepared.a}, {DNNL_ARG_WEIGHTS, prepared.b}, {DNNL_ARG_DST, prepared.c}};
#if DNNL_VERSION_MAJOR >= 3
    if (p.alpha != 1.0f) {
      const memory alpha({{1}, memory::data_type::f32, memory::format_tag::x}, Engine());
      *static_cast<float*>(alpha.get_data_handle()) = p.alpha;
      prepared.args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, alpha);
    }
#endif
    return state.cache.emplace(p, std::move(prepared)).first->second;
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN cannot multiply ({} x {}) by ({} x {}) ({} -> {}): {}", p.m,
                            p.k, p.k, p.n, Name(p.ab), Name(p.c), e.what()));
  }
}

void Execute(Prepared& prepared, const void* a, const void* b, void* c) {
  prepared.a.set_data_handle(const_cast<void*>(a));
  prepared.b.set_data_handle(const_cast<void*>(b));
  prepared.c.set_data_handle(c);
  prepared.primitive.execute(ThisThread().stream, prepared.args);
}

// One single-threaded OpenBLAS sgemm (OpenBLAS set to one thread by GemmEngineInUse).
void OpenBlasCall(const Problem& p, const float* a, const float* b, float* c) {
  // BLAS rejects leading dimensions below 1 even when unused.
  const auto ld = [](int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); };
  cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
              p.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), p.alpha, a, ld(p.lda), b, ld(p.ldb), p.beta, c, ld(p.ldc));
}

// One library call; a, b, c hold f32 for OpenBLAS.
void RunProblem(const Problem& p, bool openblas, const void* a, const void* b, void* c) {
  if (openblas) {
    OpenBlasCall(p, static_cast<const float*>(a), static_cast<const float*>(b),
                 static_cast<float*>(c));
  } else {
    Execute(Prepare(p), a, b, c);
  }
}

void CheckBlasSizes(int64_t m, int64_t n, int64_t k, int64_t max_ld) {
  BATON_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && max_ld <= INT_MAX,
              "GEMM ({} x {} x {}) exceeds BLAS's 32-bit sizes", m, n, k);
}

// 0: not decided yet; else 1 + GemmEngine.
std::atomic<int> g_engine{0};

GemmEngine ChooseEngine() {
  if (const char* env = std::getenv("BATON_CPU_GEMM"); env != nullptr && *env != '\0') {
    const std::string_view name(env);
    if (name == "onednn") return GemmEngine::kOneDnn;
    if (name == "openblas") return GemmEngine::kOpenBlas;
    throw Error(fmt::format("BATON_CPU_GEMM={}: expected onednn or openblas", name));
  }
  return GemmImplementation(256, 256, 256).starts_with("brg") ? GemmEngine::kOneDnn
                                                              : GemmEngine::kOpenBlas;
}

// c scaled by beta where k == 0 (no product to run).
void ScaleOnly(int64_t m, int64_t n, float beta, void* c, DType c_dtype, int64_t ldc) {
  BATON_CHECK(c_dtype == DType::kF32 || beta == 0.0f,
              "GEMM with k = 0 and beta != 0 into {} is not supported", Name(c_dtype));
  for (int64_t i = 0; i < m; ++i) {
    if (c_dtype == DType::kF32) {
      float* row = static_cast<float*>(c) + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    } else {
      std::memset(static_cast<uint16_t*>(c) + i * ldc, 0, static_cast<size_t>(n) * 2);
    }
  }
}

// The blocked product behind Sgemm and Bf16Gemm: a and b hold `ab` elements, c holds `c_dtype`.
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
                 int64_t ldc, DType ab, DType c_dtype, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no primitive for an empty inner dimension; be explicit
    ScaleOnly(m, n, beta, c, c_dtype, ldc);
    return;
  }
  const GemmBlocking blocking = BlockingOf(m, n);
  const bool split_rows = blocking.split_rows;
  const int64_t block = blocking.block;
  const int64_t blocks = blocking.blocks;
  const int64_t extent = split_rows ? m : n;
  const auto problem = [&](int64_t size) {
    Problem p{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, ab, c_dtype};
    (split_rows ? p.m : p.n) = size;
    return p;
  };
  const Problem full = problem(std::min(block, extent));
  const Problem last = problem(extent - (blocks - 1) * block);
  const bool openblas = ab == DType::kF32 && GemmEngineInUse() == GemmEngine::kOpenBlas;
  if (openblas) {
    CheckBlasSizes(m, n, k, std::max({lda, ldb, ldc}));
  } else {  // at most two problems (full blocks and the last one), prepared where errors can throw
    Prepare(full);
    Prepare(last);
  }
  const size_t ab_size = SizeOf(ab);
  const size_t c_size = SizeOf(c_dtype);
  const char* a_bytes = static_cast<const char*>(a);
  const char* b_bytes = static_cast<const char*>(b);
  char* c_bytes = static_cast<char*>(c);
  ParallelFor(blocks, pool, block * (split_rows ? n : m) * k, [&](int64_t index) {
    const int64_t begin = index * block;
    const Problem& p = index + 1 == blocks ? last : full;
    // Row `begin` of op(a) is a row of a, or a column when transposed; column `begin` of op(b)
    // is a column of b, or a row when transposed.
    const void* a_block = split_rows ? a_bytes + (trans_a ? begin : begin * lda) * ab_size : a;
    const void* b_block = split_rows ? b : b_bytes + (trans_b ? begin * ldb : begin) * ab_size;
    void* c_block = c_bytes + (split_rows ? begin * ldc : begin) * c_size;
    RunProblem(p, openblas, a_block, b_block, c_block);
  });
}

}  // namespace

GemmBlocking BlockingOf(int64_t m, int64_t n) {
  // Split the longer side of c: each call packs the operand along the other side again.
  GemmBlocking g;
  g.split_rows = m >= n;
  const int64_t extent = g.split_rows ? m : n;
  const int64_t per_block = (extent + kGemmMaxBlocks - 1) / kGemmMaxBlocks;
  g.block = std::max(kGemmMinBlock, (per_block + 15) / 16 * 16);
  g.blocks = (extent + g.block - 1) / g.block;
  return g;
}

void SgemmBlock(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  const Problem p{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
  RunProblem(p, GemmEngineInUse() == GemmEngine::kOpenBlas, a, b, c);
}

void CheckGemmSizes(int64_t m, int64_t n, int64_t k) {
  if (GemmEngineInUse() == GemmEngine::kOpenBlas) CheckBlasSizes(m, n, k, std::max({m, n, k}));
}

const char* Name(GemmEngine engine) {
  return engine == GemmEngine::kOneDnn ? "onednn" : "openblas";
}

GemmEngine GemmEngineInUse() {
  int engine = g_engine.load(std::memory_order_acquire);
  if (engine == 0) {
    static std::mutex mutex;
    const std::lock_guard lock(mutex);
    engine = g_engine.load(std::memory_order_acquire);
    if (engine == 0) {
      openblas_set_num_threads(1);  // process-wide: the blocks are the threads
      engine = 1 + static_cast<int>(ChooseEngine());
      g_engine.store(engine, std::memory_order_release);
    }
  }
  return static_cast<GemmEngine>(engine - 1);
}

void SetGemmEngine(GemmEngine engine) {
  GemmEngineInUse();  // the one-time setup
  g_engine.store(1 + static_cast<int>(engine), std::memory_order_release);
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           ThreadPool* pool) {
  BlockedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, DType::kF32,
              DType::kF32, pool);
}

void Bf16Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
              DType c_dtype, int64_t ldc, ThreadPool* pool) {
  BATON_CHECK(c_dtype == DType::kF32 || c_dtype == DType::kBF16,
              "Bf16Gemm writes f32 or bf16, not {}", Name(c_dtype));
  BlockedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, DType::kBF16, c_dtype,
              pool);
}

bool Bf16GemmSupported() {
  static const bool supported = [] {
    try {
      for (const bool trans_a : {false, true}) {
        for (const bool trans_b : {false, true}) {
          const Problem p{trans_a, trans_b, 64,   64,   64,           64,
                          64,      64,      1.0f, 0.0f, DType::kBF16, DType::kF32};
          if (Describe(p).impl_info_str() == std::string("ref:any")) return false;
        }
      }
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
}

bool Bf16GemmInUse() { return GemmEngineInUse() == GemmEngine::kOneDnn && Bf16GemmSupported(); }

std::string OneDnnVersion() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string GemmEnginesSummary() {
  return fmt::format("{} for f32 (oneDNN {}: f32 {}, bf16 {}); bf16 operands {}",
                     Name(GemmEngineInUse()), OneDnnVersion(), GemmImplementation(256, 256, 256),
                     GemmImplementation(256, 256, 256, DType::kBF16),
                     Bf16GemmInUse() ? "multiplied by oneDNN in bf16" : "staged to f32");
}

std::string GemmImplementation(int64_t m, int64_t n, int64_t k, DType dtype, GemmForm form) {
  const Problem p{.trans_a = form.trans_a,
                  .trans_b = form.trans_b,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = form.trans_a ? m : k,
                  .ldb = form.trans_b ? k : n,
                  .ldc = n,
                  .alpha = form.alpha,
                  .beta = form.beta,
                  .ab = dtype};
  try {
    return Describe(p).impl_info_str();
  } catch (const dnnl::error&) {
    return "none";
  }
}

}  // namespace baton::cpu
