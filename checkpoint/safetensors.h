// The safetensors file format (docs/safetensors.md), written and read with Baton's own code.
//
// Layout: an 8-byte little-endian header length N; N bytes of JSON, an object mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end)} plus an optional "__metadata__" object
// of string -> string; then the raw little-endian data, offsets relative to the byte after the
// header. The writer pads the header with spaces to a multiple of 8 bytes and lays the tensors out
// by element size (largest first), then name, as the Hugging Face writer does, so every tensor is
// aligned to its element size. The reader accepts exactly what the reference reader accepts: known
// dtypes, byte sizes that match the shapes, offsets that tile the data region with no gap, overlap
// or excess, no duplicate names.
//
// Thread safety: a SafetensorsFile is immutable after Open and may be read from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/files.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace baton {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// "F32", "F16", "BF16", "I32" for Baton's dtypes.
std::string SafetensorsDType(DType dtype);
// A Hugging Face config.json's "torch_dtype" for a float dtype: "float32", "float16", "bfloat16".
const char* HfTorchDType(DType dtype);
// Element size of any dtype the format defines ("BOOL", "U8", "F8_E4M3", "I64", ...); 0 if
// unknown.
size_t SafetensorsDTypeSize(const std::string& dtype);

// Size and checksum of a file just written.
struct WrittenFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // FNV-1a 64 of the whole file
};

// Writes `tensors` (contiguous, any device; names unique, not "__metadata__") to `path`
// atomically (AtomicFileWriter). Device tensors are staged to the host one at a time through
// `backend`, which may be null when every tensor is in host memory.
WrittenFile WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata, Backend* backend = nullptr);
// Host tensors only.
inline void ExportSafetensors(const NamedTensors& tensors, const std::string& path,
                              const SafetensorsMetadata& metadata = {}) {
  WriteSafetensors(path, tensors, metadata, nullptr);
}

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the header: "F32", "BF16", "U8", ...
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data region
  uint64_t end = 0;
  int replaced = -1;  // >= 0: the bytes are held in memory (SafetensorsFile::Replace), not mapped
  uint64_t nbytes() const { return end - begin; }
};

// A validated safetensors file, memory-mapped read-only. Move-only; views and spans it hands out
// are valid as long as it lives.
class SafetensorsFile {
 public:
  static SafetensorsFile Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  // Every tensor, ordered by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }

  const SafetensorsEntry* Find(const std::string& name) const;  // null if absent
  bool Has(const std::string& name) const { return Find(name) != nullptr; }
  // Throws naming the file and the tensor when absent.
  const SafetensorsEntry& Get(const std::string& name) const;
  std::span<const std::byte> Bytes(const SafetensorsEntry& entry) const;

  // Replaces tensor `name`'s dtype, shape and bytes by ones held in memory from now on (a reader
  // that unpacks a stored form, e.g. a checkpoint's sparse tensors). The file is not touched.
  void Replace(const std::string& name, const std::string& dtype, const Shape& shape,
               std::vector<std::byte> bytes);

  // Copies tensor `name` into `dst` (any device), converting between float dtypes through
  // `backend`. The shape must match; an error names the file, the tensor and both shapes. A
  // float tensor holding NaN or Inf is refused (CheckFinite).
  void CopyTo(const std::string& name, Tensor& dst, Backend& backend) const;

 private:
  MappedFile file_;
  uint64_t data_start_ = 0;
  SafetensorsMetadata metadata_;
  std::vector<SafetensorsEntry> entries_;
  std::vector<std::vector<std::byte>> replaced_;  // SafetensorsEntry::replaced indexes these
};

inline SafetensorsFile ReadSafetensors(const std::string& path) {
  return SafetensorsFile::Open(path);
}

// Parses and validates a header (the JSON text) for a data region of `data_bytes`; `path` only
// names the file in errors. Exposed for tests and fuzzing.
void ParseSafetensorsHeader(const std::string& path, std::string_view header, uint64_t data_bytes,
                            SafetensorsMetadata& metadata, std::vector<SafetensorsEntry>& entries);

// Throws, naming the file and the tensor, when float tensor `entry` (F32, F16 or BF16) holds NaN
// or Inf: a model or optimizer state that diverged, or a damaged file with a valid checksum. No
// reader loads such a value (eval printed "loss nan", generate sampled garbage).
void CheckFinite(const SafetensorsFile& file, const SafetensorsEntry& entry);

// A weight matrix from `file`, stored densely (any float dtype) or as INT8 ("I8" codes under
// `name`, f32 per-column scales under `name` + ".scale"; kernels/quantize.h), into `value`:
// - a float `value` takes the dense values, or the INT8 codes dequantised (float(q) * scale, in
//   f32, then rounded to its dtype: the bits the kernels' DequantizeInt8 gives);
// - an i8 `value` (with its f32 `scale`, one per column) takes the stored codes and scales, or
//   quantises the dense values (QuantizeColumnsInt8, from f32).
// Returns the names it read. Conversions happen on the host.
std::vector<std::string> CopyWeightTo(const SafetensorsFile& file, const std::string& name,
                                      Tensor& value, Tensor& scale, Backend& backend);

}  // namespace baton
