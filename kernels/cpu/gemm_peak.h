// The host's measured GEMM rate: the denominator of MFU in CPU benchmarks.
//
// Training benchmarks report model FLOP/s as a fraction of what the GEMM reaches on the same
// machine in the same run (bench/README.md defines it). The GEMM is the CPU backend's own Matmul
// (gemm.h: single-threaded oneDNN matmuls per block of c, on a pool of `threads` threads; bf16
// operands as the backend takes them), so the peak is the one a training step can reach. It
// times the machine: run it with nothing else busy.
#pragma once

#include "core/dtype.h"

namespace baton {

// GFLOP/s (2 m n k per call) of the fastest of `repeats` timed row-major C = A B calls of the
// CPU backend's Matmul (A (m,k), B (k,n), all of `dtype`: f32 or bf16) on `threads` threads,
// after one untimed warm-up call. Buffers are booked in a private ledger.
double MeasureGemmGflops(int m, int n, int k, int repeats, int threads = 1,
                         DType dtype = DType::kF32);

}  // namespace baton
