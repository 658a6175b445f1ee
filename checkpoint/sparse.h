// Sparse storage of pruned weights in checkpoint layer files (docs/checkpoints.md, "Pruned
// weights"): a parameter with a pruning mask is stored as
//   "<name>.mask"         U8 [ceil(n / 8)]: bit i (byte i / 8, bit i % 8 from the least
//                         significant) is 1 where element i (row-major) is kept;
//   "<name>", "<name>.master", "<name>.adam_m", "<name>.adam_v" (those present): the kept
//                         elements only, in order, shape [kept], each in its own dtype;
//   metadata "<name>.dense_shape": the dense shape, "rows,cols".
// Pruned elements are zero in every one of them (the trainer keeps them so), so a reader restores
// the dense tensors exactly: 0, or for 8-bit Adam m codes the signed code book's zero. Absmax
// tensors of 8-bit state stay dense (one per block of the dense layout). At 50% sparsity the mask
// costs n / 8 bytes, what 2-bit indices of a 2:4 pattern would.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace baton {

inline constexpr const char* kSparseMaskSuffix = ".mask";
inline constexpr const char* kDenseShapeSuffix = ".dense_shape";

std::vector<std::byte> PackMaskBits(const std::vector<uint8_t>& keep);
// The n u8 flags (1 kept, 0 pruned) of a bitmask of ceil(n / 8) bytes.
std::vector<uint8_t> UnpackMaskBits(std::span<const std::byte> bits, int64_t n);

// The tensors `param` stores packed, in storage order (those `file` has are packed).
std::vector<std::string> PackedTensorNames(const std::string& param);

// Replaces every packed tensor of `file` by its dense form (SafetensorsFile::Replace), checking
// that masks, dense shapes and packed lengths agree; errors name the file and the tensor.
void UnpackSparseTensors(SafetensorsFile& file);

}  // namespace baton
