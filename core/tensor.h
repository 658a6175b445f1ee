// Tensors: a view (shape, strides, dtype) onto storage booked in the memory ledger.
//
// A Tensor is a cheap handle: copies share the storage, which is freed (and released from the
// ledger) when the last handle goes. Views made with View() and Slice() share it too. Element
// access through data<T>() is for host memory only; device kernels take raw().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/memory.h"

namespace baton {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ToString(const Shape& shape);  // "(4, 128, 64)"

// One allocation. Owned storage comes from an Allocator and is booked; wrapped storage (memory
// somebody else owns, e.g. a memory-mapped file) is neither owned nor booked.
class Storage {
 public:
  Storage(Allocator& allocator, size_t bytes, MemCategory category);
  Storage(void* external, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  bool owned() const { return allocator_ != nullptr; }
  // From a MetaAllocator: booked, but there is no memory behind data().
  bool meta() const { return allocator_ != nullptr && allocator_->is_meta(); }
  // Owned storage only: Release gives the memory back to its allocator (booked off) and leaves
  // the storage empty until Restore takes `bytes()` again (uninitialised, likely elsewhere).
  // Every tensor on it sees the change; touching an empty storage's data throws. ZeRO-2's full
  // gradients between steps (worker/gradient_sync.h).
  void Release();
  void Restore();
  bool resident() const { return resident_; }

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  MemCategory category_ = MemCategory::kWorkspace;
  bool resident_ = true;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false

  // Uninitialised memory from `allocator`, booked under `category`.
  static Tensor Empty(Allocator& allocator, Shape shape, DType dtype, MemCategory category);
  // Zero-filled host tensor (CPU allocators only; device tensors are zeroed by their backend).
  static Tensor Zeros(Allocator& allocator, Shape shape, DType dtype, MemCategory category);
  // A contiguous view of memory that the caller owns and keeps alive.
  static Tensor Wrap(void* data, Shape shape, DType dtype, Device device = Device::Cpu());

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemCategory category() const;
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  bool is_contiguous() const;
  // A meta tensor (core/memory.h, MetaAllocator): shape, dtype and booking, no data. raw() gives
  // an address that identifies the storage but must not be touched; data<T>() throws.
  bool is_meta() const { return storage_ != nullptr && storage_->meta(); }
  // The storage this tensor views (shared by its copies and views); null when undefined.
  Storage* storage() const { return storage_.get(); }

  void* raw() const;
  // Typed host pointer; checks that T matches the dtype (uint16_t for f16/bf16).
  template <typename T>
  T* data() const;

  // Same elements, another shape (contiguous tensors only). One dimension may be -1.
  Tensor View(Shape shape) const;
  // Elements [begin, end) along `dim`, sharing storage.
  Tensor Slice(int dim, int64_t begin, int64_t end) const;

  std::string ToString() const;  // "f32(4, 128) activations"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

Shape ContiguousStrides(const Shape& shape);

// Host-only helpers for tests and setup code.
void CopyHost(const Tensor& src, Tensor& dst);      // same shape; converts between float types
std::vector<float> ToFloatVector(const Tensor& t);  // any float dtype, contiguous, host

}  // namespace baton
