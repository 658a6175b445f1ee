// The GPU benchmark's denominator: which device this is, its dense bf16 tensor-core peak (a
// table of data-sheet figures, overridable with BATON_PEAK_TFLOPS), and the bf16 GEMM rate that
// the CUDA backend's Matmul actually reaches on it (checked against double-precision dot
// products before it is reported).
#pragma once

#include <cstdint>
#include <string>

namespace baton::gpu_bench {

// Dense (no sparsity) bf16 tensor-core TFLOP/s with f32 accumulation, from the vendor's data
// sheet, for a device name as CUDA reports it ("NVIDIA H200"); 0 when unknown. Pure.
double DataSheetBf16Tflops(const std::string& device_name);

struct DeviceInfo {
  std::string name;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  double peak_tflops = 0;   // BATON_PEAK_TFLOPS if set, else DataSheetBf16Tflops(name)
  std::string peak_source;  // "data sheet", "BATON_PEAK_TFLOPS" or "unknown device"
};

// Throws baton::Error when there is no such GPU.
DeviceInfo QueryDevice(int device_index);

struct GemmRate {
  int64_t size = 0;      // n: (n x n) bf16 @ (n x n) bf16 -> bf16
  double tflops = 0;     // 2 n^3 x repeats / wall time of the repeats (after one warm-up)
  double max_error = 0;  // worst checked entry: |out - ref| / (|ref| + sqrt(sum (a b)^2))
  bool correct = false;  // max_error <= 1e-2
};

// Times `repeats` bf16 Matmuls of size n on GPU `device_index` through the CUDA backend.
GemmRate MeasureBf16Gemm(int device_index, int64_t n, int repeats);

}  // namespace baton::gpu_bench
