// The host's measured sgemm rate: the denominator of MFU in CPU benchmarks.
//
// Training benchmarks report model FLOP/s as a fraction of what sgemm reaches on the same machine
// in the same run (bench/README.md defines it). The GEMM is the CPU backend's own (gemm.h:
// single-threaded OpenBLAS per block of c, on a pool of `threads` threads), so the peak is the one
// the backend's Matmul can reach. It times the machine: run it with nothing else busy.
#pragma once

namespace baton {

// GFLOP/s (2 m n k per call) of the fastest of `repeats` timed f32 row-major C = A B calls
// (A (m,k), B (k,n)) on `threads` threads, after one untimed warm-up call. Buffers are booked
// in a private ledger.
double MeasureSgemmGflops(int m, int n, int k, int repeats, int threads = 1);

}  // namespace baton
