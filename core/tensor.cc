#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

namespace baton {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ToString(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Storage::Storage(Allocator& allocator, size_t bytes, MemCategory category)
    : allocator_(&allocator),
      data_(allocator.Allocate(bytes, category)),
      bytes_(bytes),
      device_(allocator.device()),
      category_(category) {}

Storage::Storage(void* external, size_t bytes, Device device)
    : data_(external), bytes_(bytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ != nullptr && resident_) allocator_->Deallocate(data_, bytes_, category_);
}

void Storage::Release() {
  BATON_CHECK(allocator_ != nullptr, "only owned storage can be released");
  BATON_CHECK(resident_, "this storage was released already");
  allocator_->Deallocate(data_, bytes_, category_);
  data_ = nullptr;
  resident_ = false;
}

void Storage::Restore() {
  BATON_CHECK(allocator_ != nullptr && !resident_, "only released storage can be restored");
  data_ = allocator_->Allocate(bytes_, category_);
  resident_ = true;
}

namespace {
void CheckShape(const Shape& shape) {
  for (int64_t d : shape) BATON_CHECK(d >= 0, "negative dimension in shape {}", ToString(shape));
}
}  // namespace

Tensor Tensor::Empty(Allocator& allocator, Shape shape, DType dtype, MemCategory category) {
  CheckShape(shape);
  Tensor t;
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * SizeOf(dtype);
  t.storage_ = std::make_shared<Storage>(allocator, bytes, category);
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::Zeros(Allocator& allocator, Shape shape, DType dtype, MemCategory category) {
  BATON_CHECK(allocator.device().is_cpu(), "Tensor::Zeros is host-only");
  Tensor t = Empty(allocator, std::move(shape), dtype, category);
  if (t.nbytes() > 0 && !t.is_meta()) std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::Wrap(void* data, Shape shape, DType dtype, Device device) {
  CheckShape(shape);
  Tensor t;
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * SizeOf(dtype);
  t.storage_ = std::make_shared<Storage>(data, bytes, device);
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::Cpu(); }

MemCategory Tensor::category() const {
  BATON_CHECK(defined(), "undefined tensor");
  return storage_->category();
}

int64_t Tensor::size(int d) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  BATON_CHECK(i >= 0 && i < n, "dimension {} out of range for shape {}", d,
              baton::ToString(shape_));
  return shape_[static_cast<size_t>(i)];
}

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_); }

void* Tensor::raw() const {
  BATON_CHECK(defined(), "undefined tensor");
  BATON_CHECK(storage_->resident(), "{}: its storage is released", ToString());
  return static_cast<char*>(storage_->data()) + offset_ * SizeOf(dtype_);
}

template <typename T>
T* Tensor::data() const {
  if constexpr (std::is_same_v<T, float>) {
    BATON_CHECK(dtype_ == DType::kF32, "tensor is {}, not f32", Name(dtype_));
  } else if constexpr (std::is_same_v<T, int32_t>) {
    BATON_CHECK(dtype_ == DType::kI32, "tensor is {}, not i32", Name(dtype_));
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    BATON_CHECK(dtype_ == DType::kF16 || dtype_ == DType::kBF16, "tensor is {}, not 16-bit",
                Name(dtype_));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    BATON_CHECK(dtype_ == DType::kU8, "tensor is {}, not u8", Name(dtype_));
  } else if constexpr (std::is_same_v<T, int8_t>) {
    BATON_CHECK(dtype_ == DType::kI8, "tensor is {}, not i8", Name(dtype_));
  } else {
    static_assert(sizeof(T) == 0, "unsupported element type");
  }
  BATON_CHECK(!is_meta(), "{} is a meta tensor: it has no data", ToString());
  return static_cast<T*>(raw());
}

template float* Tensor::data<float>() const;
template int32_t* Tensor::data<int32_t>() const;
template uint16_t* Tensor::data<uint16_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template int8_t* Tensor::data<int8_t>() const;

Tensor Tensor::View(Shape shape) const {
  BATON_CHECK(is_contiguous(), "View of a non-contiguous tensor {}", ToString());
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      BATON_CHECK(inferred < 0, "more than one -1 in {}", baton::ToString(shape));
      inferred = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    BATON_CHECK(known > 0 && numel() % known == 0, "cannot view {} as {}", ToString(),
                baton::ToString(shape));
    shape[static_cast<size_t>(inferred)] = numel() / known;
  }
  BATON_CHECK(NumElements(shape) == numel(), "cannot view {} as {}", ToString(),
              baton::ToString(shape));
  Tensor t = *this;
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Slice(int d, int64_t begin, int64_t end) const {
  const int64_t extent = size(d);
  const size_t i = static_cast<size_t>(d < 0 ? d + dim() : d);
  BATON_CHECK(0 <= begin && begin <= end && end <= extent, "slice [{}, {}) of dimension {} of {}",
              begin, end, d, ToString());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(begin * strides_[i]);
  t.shape_[i] = end - begin;
  return t;
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined";
  return fmt::format("{}{} {}", Name(dtype_), baton::ToString(shape_),
                     storage_->owned() ? Name(storage_->category()) : "wrapped");
}

void CopyHost(const Tensor& src, Tensor& dst) {
  BATON_CHECK(src.shape() == dst.shape(), "copy {} into {}", src.ToString(), dst.ToString());
  BATON_CHECK(src.is_contiguous() && dst.is_contiguous(), "copy needs contiguous tensors");
  BATON_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "CopyHost on device memory");
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.raw(), src.raw(), src.nbytes());
  } else {
    ConvertFloats(src.raw(), src.dtype(), dst.raw(), dst.dtype(), static_cast<size_t>(src.numel()));
  }
}

std::vector<float> ToFloatVector(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Tensor view = Tensor::Wrap(out.data(), t.shape(), DType::kF32);
  CopyHost(t, view);
  return out;
}

}  // namespace baton
