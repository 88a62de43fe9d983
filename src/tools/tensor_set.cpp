#include "tools/tensor_set.hpp"

#include <cstring>
#include <limits>

namespace attnbwd::tools {

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::BF16: return 2;
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::BF16: return "BF16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType& out) {
  for (DType d : {DType::BF16, DType::F32, DType::F64, DType::I32}) {
    if (name == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t shape_numel(const std::vector<std::int64_t>& shape, const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) throw Error(what, "negative extent in shape " + shape_string(shape));
    // Keep numel * 8 bytes representable too.
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / 8 / e)
      throw Error(what, "shape " + shape_string(shape) + " is too large");
    n *= e;
  }
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<std::int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<std::size_t>(shape_numel(t.shape)) * dtype_size(dtype), 0);
  return t;
}

void HostTensor::check_type(DType want) const {
  if (want != dtype)
    throw Error(std::string("tensor holds ") + dtype_name(dtype) + ", accessed as " + dtype_name(want));
}

HostTensor& TensorSet::add(const std::string& name, HostTensor tensor) {
  if (contains(name)) throw Error(name, "duplicate tensor name");
  entries_.emplace_back(name, std::move(tensor));
  return entries_.back().second;
}

const HostTensor* TensorSet::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.first == name) return &e.second;
  return nullptr;
}

HostTensor* TensorSet::find(const std::string& name) {
  for (auto& e : entries_)
    if (e.first == name) return &e.second;
  return nullptr;
}

namespace {
const HostTensor& expect_present(const TensorSet& set, const std::string& name, DType dtype) {
  const HostTensor* t = set.find(name);
  if (!t) throw Error(name, "missing tensor");
  if (t->dtype != dtype)
    throw Error(name, std::string("expected dtype ") + dtype_name(dtype) + ", got " + dtype_name(t->dtype));
  return *t;
}
}  // namespace

const HostTensor& expect(const TensorSet& set, const std::string& name, DType dtype,
                         const std::vector<std::int64_t>& shape) {
  const HostTensor& t = expect_present(set, name, dtype);
  if (t.shape != shape)
    throw Error(name, "expected shape " + shape_string(shape) + ", got " + shape_string(t.shape));
  return t;
}

const HostTensor& expect_rank(const TensorSet& set, const std::string& name, DType dtype, int rank) {
  const HostTensor& t = expect_present(set, name, dtype);
  if (static_cast<int>(t.shape.size()) != rank)
    throw Error(name, "expected rank " + std::to_string(rank) + ", got shape " + shape_string(t.shape));
  return t;
}

double scalar(const TensorSet& set, const std::string& name) {
  const HostTensor* t = set.find(name);
  if (!t) throw Error(name, "missing scalar");
  if (!t->shape.empty()) throw Error(name, "expected a 0-d scalar, got shape " + shape_string(t->shape));
  if (t->dtype == DType::F64) return t->data<double>()[0];
  if (t->dtype == DType::F32) return t->data<float>()[0];
  throw Error(name, std::string("expected a scalar of dtype F32 or F64, got ") + dtype_name(t->dtype));
}

HostTensor make_scalar(double value) {
  HostTensor t = HostTensor::zeros(DType::F64, {});
  std::memcpy(t.bytes.data(), &value, sizeof value);
  return t;
}

}  // namespace attnbwd::tools
