// Host tensors as the tools hold them: raw little-endian bytes plus dtype and shape, collected in an
// ordered name -> tensor set (the order a safetensors file or a definition.json lists them in).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnbwd/bf16.hpp"
#include "attnbwd/error.hpp"

namespace attnbwd::tools {

enum class DType { BF16, F32, F64, I32 };

std::size_t dtype_size(DType d);
const char* dtype_name(DType d);  // the safetensors spelling: "BF16", "F32", "F64", "I32"
// Parses a safetensors dtype name; returns false when it is not one of the four above.
bool dtype_from_name(const std::string& name, DType& out);

template <class T>
struct dtype_of;
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::I32;
};

std::string shape_string(const std::vector<std::int64_t>& shape);  // "[2,3]", "[]" for a scalar

// Number of elements of a shape (1 for a 0-d scalar); throws on negative extents or overflow.
std::int64_t shape_numel(const std::vector<std::int64_t>& shape, const std::string& what = "shape");

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;   // empty: a 0-d scalar
  std::vector<unsigned char> bytes;  // numel * dtype_size, little-endian, row-major

  // A zero-filled tensor.
  static HostTensor zeros(DType dtype, std::vector<std::int64_t> shape);

  std::int64_t numel() const { return shape_numel(shape); }

  // Typed views of the bytes; throw when T does not match dtype. The vector's storage comes from
  // operator new, aligned for any scalar type, so the casts are safe.
  template <class T>
  T* data() {
    check_type(dtype_of<T>::value);
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    check_type(dtype_of<T>::value);
    return reinterpret_cast<const T*>(bytes.data());
  }

 private:
  void check_type(DType want) const;
};

// Ordered map name -> tensor. Lookup is linear: sets hold a dozen tensors at most.
class TensorSet {
 public:
  using Entry = std::pair<std::string, HostTensor>;

  // Adds a tensor; throws when the name is already present.
  HostTensor& add(const std::string& name, HostTensor tensor);
  const HostTensor* find(const std::string& name) const;
  HostTensor* find(const std::string& name);
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
};

// The accessors ops use on their inputs: each throws attnbwd::Error(name, ...) saying what was
// expected and what was found.
const HostTensor& expect(const TensorSet& set, const std::string& name, DType dtype,
                         const std::vector<std::int64_t>& shape);
// A tensor of the given dtype and rank, any extents (for reading the free axes off the first input).
const HostTensor& expect_rank(const TensorSet& set, const std::string& name, DType dtype, int rank);
// A 0-d F32 or F64 tensor, returned as double.
double scalar(const TensorSet& set, const std::string& name);

// A 0-d F64 tensor holding `value` (how the tools store scalar inputs).
HostTensor make_scalar(double value);

}  // namespace attnbwd::tools
