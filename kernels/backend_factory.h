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

// True when this binary contains the CUDA backend (it may still find no GPU at run time).
bool BuiltWithCuda();

}  // namespace baton
