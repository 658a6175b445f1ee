// How parameters are cut across a stage's tensor-parallel ranks (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "model/ops.h"

namespace baton {

std::pair<int64_t, int64_t> PartOf(int64_t n, int t, int parts) {
  BATON_CHECK(parts >= 1 && 0 <= t && t < parts && n >= parts,
              "part {} of {} of a dimension of {}: each part needs at least one row", t, parts, n);
  return {n * t / parts, n * (t + 1) / parts};
}

std::vector<std::pair<int64_t, int64_t>> PartRanges(const TensorSplit& split) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t at = 0;
  for (const int64_t n : split.sections) {
    const auto [begin, end] = PartOf(n, split.part, split.parts);
    ranges.emplace_back(at + begin, end - begin);
    at += n;
  }
  return ranges;
}

Shape PartShape(const Shape& full, const TensorSplit& split) {
  if (!split.cut()) return full;
  BATON_CHECK(split.dim < static_cast<int>(full.size()), "cannot cut dimension {} of {}", split.dim,
              ToString(full));
  const int64_t total = std::accumulate(split.sections.begin(), split.sections.end(), int64_t{0});
  BATON_CHECK(total == full[static_cast<size_t>(split.dim)],
              "the sections of dimension {} add up to {}, not {} of {}", split.dim, total,
              full[static_cast<size_t>(split.dim)], ToString(full));
  Shape shape = full;
  int64_t size = 0;
  for (const auto& [begin, n] : PartRanges(split)) size += n;
  shape[static_cast<size_t>(split.dim)] = size;
  return shape;
}

Shape WholeShape(const Shape& part, const TensorSplit& split) {
  if (!split.cut()) return part;
  Shape shape = part;
  shape.at(static_cast<size_t>(split.dim)) =
      std::accumulate(split.sections.begin(), split.sections.end(), int64_t{0});
  return shape;
}

namespace {

// Calls copy(full_offset, part_offset, bytes) for every contiguous run of the part, both offsets
// in bytes.
template <typename Copy>
void ForEachRun(const Shape& full_shape, size_t element_bytes, const TensorSplit& split,
                Copy copy) {
  const size_t dim = static_cast<size_t>(split.dim);
  int64_t outer = 1;
  for (size_t d = 0; d < dim; ++d) outer *= full_shape[d];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < full_shape.size(); ++d) inner *= full_shape[d];
  const int64_t full_row = full_shape[dim] * inner;
  const std::vector<std::pair<int64_t, int64_t>> ranges = PartRanges(split);
  int64_t part_row = 0;
  for (const auto& [begin, n] : ranges) part_row += n * inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (const auto& [begin, n] : ranges) {
      copy(static_cast<size_t>(o * full_row + begin * inner) * element_bytes,
           static_cast<size_t>(o * part_row + at) * element_bytes,
           static_cast<size_t>(n * inner) * element_bytes);
      at += n * inner;
    }
  }
}

// Copies every run of the part between the whole tensor and the part, either way.
void CopyRuns(const Shape& full_shape, size_t element_bytes, const TensorSplit& split,
              const void* from, void* to, bool to_part) {
  if (!split.cut()) {
    std::memcpy(to, from, static_cast<size_t>(NumElements(full_shape)) * element_bytes);
    return;
  }
  PartShape(full_shape, split);  // checks
  const auto* src = static_cast<const char*>(from);
  auto* dst = static_cast<char*>(to);
  ForEachRun(full_shape, element_bytes, split, [&](size_t full_at, size_t part_at, size_t bytes) {
    if (to_part) {
      std::memcpy(dst + part_at, src + full_at, bytes);
    } else {
      std::memcpy(dst + full_at, src + part_at, bytes);
    }
  });
}

}  // namespace

void ExtractPart(const void* full, const Shape& full_shape, size_t element_bytes,
                 const TensorSplit& split, void* part) {
  CopyRuns(full_shape, element_bytes, split, full, part, /*to_part=*/true);
}

void InsertPart(const void* part, const Shape& full_shape, size_t element_bytes,
                const TensorSplit& split, void* full) {
  CopyRuns(full_shape, element_bytes, split, part, full, /*to_part=*/false);
}

namespace {

// Positions [begin, end) of each sequence of `t` (B, S, C), one contiguous view per batch row.
std::vector<Tensor> SequenceRows(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < t.size(0); ++b) {
    rows.push_back(t.Slice(0, b, b + 1).View({t.size(1), t.size(2)}).Slice(0, begin, end));
  }
  return rows;
}

constexpr int kSequenceDim = 1;

}  // namespace

Tensor GatherSequence(Backend& backend, TensorGroup& group, const Tensor& part,
                      MemCategory category) {
  BATON_CHECK(part.dim() == 3, "a sequence part must be (B, S/T, C), got {}", part.ToString());
  const int64_t s = part.size(1);
  Tensor full = model_ops::NewTensor(backend, {part.size(0), s * group.size(), part.size(2)},
                                     part.dtype(), category);
  const int64_t begin = s * group.rank();
  std::vector<Tensor> to = SequenceRows(full, begin, begin + s);
  const std::vector<Tensor> from = SequenceRows(part, 0, s);
  for (size_t b = 0; b < to.size(); ++b) backend.Copy(from[b], to[b]);
  group.AllGather(full, kSequenceDim);
  return full;
}

Tensor WholeSequence(Backend& backend, TensorGroup* group, const Tensor& x, MemCategory category) {
  if (group == nullptr || !group->sequence_parallel()) return x;
  return GatherSequence(backend, *group, x, category);
}

Tensor ScatterSequenceSum(Backend& backend, TensorGroup& group, Tensor& full,
                          MemCategory category) {
  BATON_CHECK(full.dim() == 3 && full.size(1) % group.size() == 0,
              "a sequence of {} positions does not cut into {} parts ({})", full.size(1),
              group.size(), full.ToString());
  group.ReduceScatterSum(full, kSequenceDim);
  const int64_t s = full.size(1) / group.size();
  Tensor part =
      model_ops::NewTensor(backend, {full.size(0), s, full.size(2)}, full.dtype(), category);
  const int64_t begin = s * group.rank();
  const std::vector<Tensor> from = SequenceRows(full, begin, begin + s);
  std::vector<Tensor> to = SequenceRows(part, 0, s);
  for (size_t b = 0; b < to.size(); ++b) backend.Copy(from[b], to[b]);
  return part;
}

}  // namespace baton
