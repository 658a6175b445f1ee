// The host's measured sgemm rate: the denominator of MFU in CPU benchmarks.
//
// Training benchmarks report model FLOP/s as a fraction of what OpenBLAS sgemm reaches on the same
// machine in the same run (bench/README.md defines it). Uses OpenBLAS's current thread count,
// which MakeCpuBackend(ledger, num_threads) sets: make the backend first. Not thread-safe against
// concurrent GEMMs (it times the machine).
#pragma once

namespace baton {

// GFLOP/s (2 m n k per call) of the fastest of `repeats` timed f32 row-major C = A B calls
// (A (m,k), B (k,n)), after one untimed warm-up call. Buffers are booked in a private ledger.
double MeasureSgemmGflops(int m, int n, int k, int repeats);

}  // namespace baton
