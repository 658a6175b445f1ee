// MakeBackend: the backend for a Device, CPU or CUDA, chosen at run time.
//
// Callers that only know a Device (the worker: config device.type plus its local rank) use this
// instead of MakeCpuBackend / MakeCudaBackend, so they compile the same with and without the CUDA
// toolkit. The factory lives apart from backend.h so that the CPU-only kernel library keeps no
// link dependency on CUDA.
#pragma once

#include <memory>

#include "core/device.h"
#include "core/memory.h"
#include "kernels/backend.h"

namespace baton {

// The CPU backend with `threads` threads for Device::Cpu(); the CUDA backend on GPU
// `device.index` (exact f32 GEMMs; `threads` unused) for a CUDA device. Throws baton::Error
// when the binary was built without CUDA ("... built without CUDA ...") or the GPU does not
// exist ("no CUDA device: ...").
std::unique_ptr<Backend> MakeBackend(Device device, MemoryLedger& ledger, int threads);

// A ledger-only backend standing for `device` (kernels/backend.h, MakeCpuMetaBackend): it books
// what that device's backend books and computes nothing. Needs no GPU.
std::unique_ptr<Backend> MakeMetaBackend(Device device, MemoryLedger& ledger, int threads);

// True when this binary contains the CUDA backend (it may still find no GPU at run time).
bool BuiltWithCuda();

// How many GPUs this process can use (0 without CUDA or without a device).
int CudaDevicesVisible();

// The device a worker with `local_rank` (its index among the processes on its machine) uses:
// the CPU, or GPU local_rank modulo the machine's GPU count, so stages outnumbering GPUs share
// them round-robin (two stages on one GPU both get cuda:0). Throws like MakeBackend when CUDA is
// missing.
Device DeviceForLocalRank(DeviceType type, int local_rank);

// The CUDA backend's compute stream as a cudaStream_t (NcclOptions::compute_stream); nullptr for
// any other backend. void* keeps this header free of CUDA.
void* NativeStream(Backend& backend);

}  // namespace baton
