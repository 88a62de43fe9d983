// The key of one op call for Context::enqueue's CUDA-graph cache: everything the enqueued work
// depends on — the op, every tensor's address and extents, and the caller's scalars, options and
// variant switches (as 64-bit words).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "args_visit.hpp"
#include "context.hpp"

namespace attnbwd::cuda {

inline std::uint64_t bits_of(double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// FNV-1a of an environment variable's value (0 when unset).
inline std::uint64_t env_word(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  std::uint64_t h = 1469598103934665603ull;
  for (; *v; ++v) h = (h ^ static_cast<unsigned char>(*v)) * 1099511628211ull;
  return h;
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
