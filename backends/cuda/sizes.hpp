// Launch-size arithmetic shared by the fast path's host code.
#pragma once

#include <cstdint>

namespace attnbwd::cuda {

// x rounded up to a multiple of m (m > 0).
inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// Blocks of `per_block` items (threads, rows, ...) that cover n items.
inline unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace attnbwd::cuda
