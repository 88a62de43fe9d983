// The key of one op call for Context::enqueue's CUDA-graph cache: everything the enqueued work
// depends on — the op, every tensor's address and extents, and the caller's scalars and options (as
// 64-bit words). The variant switches (every ATTNBWD_* variable) are added by enqueue itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "args_visit.hpp"
#include "context.hpp"

namespace attnbwd::cuda {

inline std::uint64_t bits_of(double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

template <class Args>
Context::GraphKey graph_key(std::uint64_t op, Args a, std::initializer_list<std::uint64_t> extra) {
  Context::GraphKey key{op};
  detail::for_each_tensor(a, [&](const char*, auto& t, bool) {
    key.push_back(reinterpret_cast<std::uintptr_t>(t.data));
    key.push_back(static_cast<std::uint64_t>(t.rank));
    for (int i = 0; i < t.rank; ++i) key.push_back(static_cast<std::uint64_t>(t.extent[i]));
  });
  key.insert(key.end(), extra.begin(), extra.end());
  return key;
}

}  // namespace attnbwd::cuda
