// The safetensors writer and validating reader (see safetensors.h, docs/safetensors.md).
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_fields.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Baton writes host memory as is");

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeInfo {
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1},
                                 {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
                                 {"BF16", 2},    {"I32", 4}, {"U32", 4}, {"F32", 4},
                                 {"F64", 8},     {"I64", 8}, {"U64", 8}};

DType BatonDType(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  if (entry.dtype == "F32") return DType::kF32;
  if (entry.dtype == "F16") return DType::kF16;
  if (entry.dtype == "BF16") return DType::kBF16;
  if (entry.dtype == "I32") return DType::kI32;
  if (entry.dtype == "U8") return DType::kU8;
  if (entry.dtype == "I8") return DType::kI8;
  BATON_FAIL("{}: tensor {} has dtype {}, which Baton cannot load (F32, F16, BF16, I32, U8, I8)",
             file.path(), entry.name, entry.dtype);
}

uint64_t CheckedProduct(const std::string& path, const std::string& name, const Shape& shape,
                        size_t element_size) {
  uint64_t bytes = element_size;
  for (int64_t d : shape) {
    const uint64_t dim = static_cast<uint64_t>(d);
    BATON_CHECK(dim == 0 || bytes <= UINT64_MAX / dim, "{}: tensor {}: shape {} overflows", path,
                name, ToString(shape));
    bytes *= dim;
  }
  return bytes;
}

SafetensorsEntry ParseEntry(const std::string& path, const std::string& name,
                            const nlohmann::json& info) {
  BATON_CHECK(info.is_object(), "{}: tensor {}: header entry is not an object", path, name);
  SafetensorsEntry entry;
  entry.name = name;
  BATON_CHECK(info.contains("dtype") && info["dtype"].is_string(),
              "{}: tensor {}: missing string \"dtype\"", path, name);
  entry.dtype = info["dtype"].get<std::string>();
  const size_t element_size = SafetensorsDTypeSize(entry.dtype);
  BATON_CHECK(element_size > 0, "{}: tensor {}: unknown dtype \"{}\"", path, name, entry.dtype);
  BATON_CHECK(info.contains("shape") && info["shape"].is_array(),
              "{}: tensor {}: missing array \"shape\"", path, name);
  for (const nlohmann::json& d : info["shape"]) {
    BATON_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t{INT64_MAX},
                "{}: tensor {}: shape entries must be non-negative integers, got {}", path, name,
                d.dump());
    entry.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const nlohmann::json* offsets = info.contains("data_offsets") ? &info["data_offsets"] : nullptr;
  BATON_CHECK(offsets != nullptr && offsets->is_array() && offsets->size() == 2 &&
                  (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
              "{}: tensor {}: \"data_offsets\" must be [begin, end] of unsigned integers", path,
              name);
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  BATON_CHECK(entry.begin <= entry.end, "{}: tensor {}: data_offsets [{}, {}) run backwards", path,
              name, entry.begin, entry.end);
  const uint64_t expected = CheckedProduct(path, name, entry.shape, element_size);
  BATON_CHECK(entry.nbytes() == expected,
              "{}: tensor {}: {} {} needs {} bytes but data_offsets [{}, {}) hold {}", path, name,
              entry.dtype, ToString(entry.shape), expected, entry.begin, entry.end, entry.nbytes());
  return entry;
}

// The tensors must tile [0, data_bytes) exactly: no overlap, no gap, nothing past the end.
void CheckTiling(const std::string& path, std::vector<SafetensorsEntry> entries,
                 uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t position = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries) {
    BATON_CHECK(e.begin >= position, "{}: tensor {} [{}, {}) overlaps tensor {} [{}, {})", path,
                e.name, e.begin, e.end, previous->name, previous->begin, previous->end);
    BATON_CHECK(e.begin == position, "{}: tensor {} starts at {}, leaving a gap after byte {}",
                path, e.name, e.begin, position);
    BATON_CHECK(e.end <= data_bytes,
                "{}: tensor {} ends at byte {} of the data but the file holds only {} data "
                "bytes (truncated?)",
                path, e.name, e.end, data_bytes);
    position = e.end;
    previous = &e;
  }
  BATON_CHECK(position == data_bytes,
              "{}: the data region holds {} bytes but the tensors cover only {} (trailing bytes)",
              path, data_bytes, position);
}

std::string BuildHeader(const std::vector<std::pair<const std::string*, const Tensor*>>& order,
                        const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : order) {
    const uint64_t bytes = tensor->nbytes();
    header[*name] = {{"dtype", SafetensorsDType(tensor->dtype())},
                     {"shape", tensor->shape()},
                     {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the next byte is 8-aligned in the file
  return text;
}

void WriteTensorData(AtomicFileWriter& writer, const std::string& name, const Tensor& tensor,
                     Backend* backend) {
  if (tensor.nbytes() == 0) return;
  if (tensor.device().is_cpu()) {
    writer.Write(tensor.raw(), tensor.nbytes());
    return;
  }
  BATON_CHECK(backend != nullptr, "{}: tensor {} is on {} and no backend was given to stage it",
              writer.path(), name, tensor.ToString());
  // Host staging for file I/O (like Trainer::LayerDigests): not tensor memory, never booked.
  std::vector<uint64_t> host((tensor.nbytes() + 7) / 8);
  Tensor view = Tensor::Wrap(host.data(), tensor.shape(), tensor.dtype());
  backend->Copy(tensor, view);
  backend->Synchronize();
  writer.Write(host.data(), tensor.nbytes());
}

}  // namespace

const char* HfTorchDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("Hugging Face weights must be f32, f16 or bf16, not {}", Name(dtype));
}

std::string SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
  }
  BATON_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

size_t SafetensorsDTypeSize(const std::string& dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (dtype == info.name) return info.size;
  }
  return 0;
}

WrittenFile WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata, Backend* backend) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    BATON_CHECK(!name.empty() && name != kMetadataKey, "{}: invalid tensor name \"{}\"", path,
                name);
    BATON_CHECK(names.insert(name).second, "{}: tensor {} given twice", path, name);
    BATON_CHECK(tensor.defined() && tensor.is_contiguous(),
                "{}: tensor {} must be a defined, contiguous tensor", path, name);
    order.emplace_back(&name, &tensor);
  }
  // Largest elements first, then by name: every tensor starts aligned to its element size.
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const size_t sa = SizeOf(a.second->dtype()), sb = SizeOf(b.second->dtype());
    return sa != sb ? sa > sb : *a.first < *b.first;
  });
  const std::string header = BuildHeader(order, metadata);
  if (backend != nullptr) backend->Synchronize();

  MakeDirectories(std::filesystem::path(path).parent_path().empty()
                      ? "."
                      : std::filesystem::path(path).parent_path().string());
  AtomicFileWriter writer(path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  writer.Write(length, sizeof(length));
  writer.Write(header);
  for (const auto& [name, tensor] : order) WriteTensorData(writer, *name, *tensor, backend);
  writer.Commit();
  return {path, writer.bytes_written(), writer.checksum()};
}

void ParseSafetensorsHeader(const std::string& path, std::string_view header, uint64_t data_bytes,
                            SafetensorsMetadata& metadata, std::vector<SafetensorsEntry>& entries) {
  BATON_CHECK(!header.empty() && header.front() == '{',
              "{}: the header does not start with '{{': not a safetensors file", path);
  std::set<std::string> seen;
  std::string duplicate;
  // Duplicate top-level names would silently shadow each other in a JSON object: refuse them.
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event,
                            nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  const nlohmann::json json = ParseJson(header, path + ": the header", on_event);
  BATON_CHECK(duplicate.empty(), "{}: tensor {} appears twice in the header", path, duplicate);
  BATON_CHECK(json.is_object(), "{}: the header is not a JSON object", path);
  metadata.clear();
  entries.clear();
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      BATON_CHECK(value.is_object(), "{}: __metadata__ is not an object", path);
      for (const auto& [mkey, mvalue] : value.items()) {
        BATON_CHECK(mvalue.is_string(), "{}: __metadata__ value of \"{}\" is not a string", path,
                    mkey);
        metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    entries.push_back(ParseEntry(path, key, value));
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  CheckTiling(path, entries, data_bytes);
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.file_ = MappedFile::Open(path);
  const uint64_t size = file.file_.size();
  BATON_CHECK(size >= 8, "{}: {} bytes is too short for a safetensors file (truncated?)", path,
              size);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    header_bytes |= static_cast<uint64_t>(std::to_integer<uint8_t>(file.file_.data()[i]))
                    << (8 * i);
  }
  // The length field is the file's first 8 bytes: an implausible one is not worth printing (a
  // text file's "root:x:0" reads as 3475222254926655346), and no error quotes a file's bytes.
  BATON_CHECK(header_bytes <= size - 8,
              "{}: the header length field exceeds the file size ({} bytes): not a safetensors "
              "file, or a truncated one",
              path, size);
  BATON_CHECK(header_bytes <= kMaxHeaderBytes,
              "{}: the header length field exceeds the {}-byte limit of the reference reader: not "
              "a safetensors file",
              path, kMaxHeaderBytes);
  file.data_start_ = 8 + header_bytes;
  const std::string_view header(reinterpret_cast<const char*>(file.file_.data()) + 8, header_bytes);
  ParseSafetensorsHeader(path, header, size - file.data_start_, file.metadata_, file.entries_);
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const auto& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsEntry& SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsEntry* entry = Find(name);
  BATON_CHECK(entry != nullptr, "{}: no tensor named {}", path(), name);
  return *entry;
}

std::span<const std::byte> SafetensorsFile::Bytes(const SafetensorsEntry& entry) const {
  if (entry.replaced >= 0) return replaced_.at(static_cast<size_t>(entry.replaced));
  return {file_.data() + data_start_ + entry.begin, entry.nbytes()};
}

void SafetensorsFile::Replace(const std::string& name, const std::string& dtype, const Shape& shape,
                              std::vector<std::byte> bytes) {
  const SafetensorsEntry& found = Get(name);
  SafetensorsEntry& entry = entries_[static_cast<size_t>(&found - entries_.data())];
  BATON_CHECK(SafetensorsDTypeSize(dtype) > 0, "{}: replacing {} with unknown dtype {}", path(),
              name, dtype);
  const uint64_t expected = CheckedProduct(path(), name, shape, SafetensorsDTypeSize(dtype));
  BATON_CHECK(expected == bytes.size(), "{}: replacing {} with {} {} needs {} bytes, got {}",
              path(), name, dtype, ToString(shape), expected, bytes.size());
  entry.dtype = dtype;
  entry.shape = shape;
  entry.begin = 0;
  entry.end = bytes.size();
  entry.replaced = static_cast<int>(replaced_.size());
  replaced_.push_back(std::move(bytes));
}

void CheckFinite(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  const std::span<const std::byte> bytes = file.Bytes(entry);
  int64_t count = 0, first = -1;
  const auto note = [&](bool finite, int64_t i) {
    if (finite) return;
    if (count++ == 0) first = i;
  };
  if (entry.dtype == "F32") {
    const int64_t n = static_cast<int64_t>(bytes.size() / 4);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, bytes.data() + i * 4, 4);
      note((bits & 0x7f800000u) != 0x7f800000u, i);
    }
  } else if (entry.dtype == "F16" || entry.dtype == "BF16") {
    const uint16_t exponent = entry.dtype == "F16" ? 0x7c00 : 0x7f80;
    const int64_t n = static_cast<int64_t>(bytes.size() / 2);
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + i * 2, 2);
      note((bits & exponent) != exponent, i);
    }
  }
  BATON_CHECK(count == 0,
              "{}: tensor {} holds {} non-finite value(s) (NaN or Inf; the first at flat index "
              "{}): refusing to load it",
              file.path(), entry.name, count, first);
}

void SafetensorsFile::CopyTo(const std::string& name, Tensor& dst, Backend& backend) const {
  const SafetensorsEntry& entry = Get(name);
  CheckFinite(*this, entry);
  const DType dtype = BatonDType(*this, entry);
  BATON_CHECK(entry.shape == dst.shape(), "{}: tensor {} has shape {} but {} was expected", path(),
              name, ToString(entry.shape), ToString(dst.shape()));
  BATON_CHECK(dtype == dst.dtype() || (IsFloating(dtype) && IsFloating(dst.dtype())),
              "{}: tensor {} is {} and cannot be converted to {}", path(), name, entry.dtype,
              Name(dst.dtype()));
  const std::span<const std::byte> bytes = Bytes(entry);
  const void* source = bytes.data();
  std::vector<uint64_t> aligned;  // I/O staging for a file whose writer did not align its data
  if (!bytes.empty() && reinterpret_cast<uintptr_t>(source) % SizeOf(dtype) != 0) {
    aligned.resize((bytes.size() + 7) / 8);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    source = aligned.data();
  }
  // The mapping is read-only; Copy only reads its source.
  const Tensor view = Tensor::Wrap(const_cast<void*>(source), entry.shape, dtype);
  backend.Copy(view, dst);
  backend.Synchronize();  // `aligned` and the mapping must outlive an asynchronous copy
}

std::vector<std::string> CopyWeightTo(const SafetensorsFile& file, const std::string& name,
                                      Tensor& value, Tensor& scale, Backend& backend) {
  const SafetensorsEntry& entry = file.Get(name);
  const std::string scale_name = name + ".scale";
  const bool stored_int8 = entry.dtype == "I8";
  const bool wants_int8 = value.dtype() == DType::kI8;
  if (!stored_int8 && !wants_int8) {
    file.CopyTo(name, value, backend);
    return {name};
  }
  BATON_CHECK(entry.shape.size() == 2 && entry.shape == value.shape(),
              "{}: tensor {} has shape {} but {} was expected", file.path(), name,
              ToString(entry.shape), ToString(value.shape()));
  const int64_t rows = entry.shape[0], cols = entry.shape[1];
  const size_t n = static_cast<size_t>(rows * cols);
  if (stored_int8) {
    BATON_CHECK(file.Has(scale_name), "{}: INT8 tensor {} comes without its scales {}", file.path(),
                name, scale_name);
    const SafetensorsEntry& scales = file.Get(scale_name);
    BATON_CHECK(scales.dtype == "F32" && scales.shape == Shape{cols},
                "{}: {} is {} {}, but the INT8 tensor {} needs F32 [{}]", file.path(), scale_name,
                scales.dtype, ToString(scales.shape), name, cols);
    CheckFinite(file, scales);
    if (wants_int8) {
      file.CopyTo(name, value, backend);
      file.CopyTo(scale_name, scale, backend);
      return {name, scale_name};
    }
    std::vector<int8_t> codes(n);
    std::vector<float> column_scales(static_cast<size_t>(cols));
    std::memcpy(codes.data(), file.Bytes(entry).data(), n);
    std::memcpy(column_scales.data(), file.Bytes(scales).data(), column_scales.size() * 4);
    std::vector<float> dense(n);
    DequantizeColumnsInt8(codes.data(), column_scales.data(), rows, cols, dense.data());
    std::vector<std::byte> converted(n * SizeOf(value.dtype()));
    ConvertFloats(dense.data(), DType::kF32, converted.data(), value.dtype(), n);
    backend.Copy(Tensor::Wrap(converted.data(), value.shape(), value.dtype()), value);
    backend.Synchronize();
    return {name, scale_name};
  }
  BATON_CHECK(scale.defined() && scale.dtype() == DType::kF32 && scale.shape() == Shape{cols},
              "the INT8 parameter {} needs f32 scales [{}], got {}", name, cols, scale.ToString());
  const DType stored = BatonDType(file, entry);
  BATON_CHECK(IsFloating(stored), "{}: tensor {} is {}, not a float or INT8 weight", file.path(),
              name, entry.dtype);
  CheckFinite(file, entry);  // a NaN or Inf would poison its column's scale
  const std::span<const std::byte> bytes = file.Bytes(entry);
  std::vector<std::byte> raw(bytes.begin(), bytes.end());  // aligned for the conversion
  std::vector<float> dense(n);
  ConvertFloats(raw.data(), stored, dense.data(), DType::kF32, n);
  std::vector<int8_t> codes(n);
  std::vector<float> column_scales(static_cast<size_t>(cols));
  QuantizeColumnsInt8(dense.data(), rows, cols, codes.data(), column_scales.data());
  backend.Copy(Tensor::Wrap(codes.data(), value.shape(), DType::kI8), value);
  backend.Copy(Tensor::Wrap(column_scales.data(), scale.shape(), DType::kF32), scale);
  backend.Synchronize();
  return {name};
}

}  // namespace baton
