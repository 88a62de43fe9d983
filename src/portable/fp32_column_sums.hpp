// Deterministic column sums over tokens (bias, γ and β gradients of the fp32 ops): no atomics, so
// every run gives the same bits. Pass 1: one team per (chunk of rows, block of columns), each
// thread summing one column over its chunk in row order; pass 2: the chunk partials in chunk order.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "portable/fp32_team.hpp"

namespace attnbwd::portable::fp32 {

constexpr std::int64_t kSumChunkRows = 64;
constexpr int kSumBlockCols = 128;

inline std::int64_t column_sum_chunks(std::int64_t rows) { return (rows + kSumChunkRows - 1) / kSumChunkRows; }
// Floats of workspace `column_sums` needs for a rows×cols input.
inline std::int64_t column_sum_workspace(std::int64_t rows, std::int64_t cols) {
  return column_sum_chunks(rows) * cols;
}

// The element value of a row-major matrix.
struct Elements {
  const float* a;
  std::int64_t ld;
  KOKKOS_INLINE_FUNCTION float operator()(std::int64_t r, std::int64_t c) const { return a[r * ld + c]; }
};

// out[c] = Σ_r value(r, c) for r < rows, c < cols. `partial` holds column_sum_workspace floats.
template <class ExecSpace, class Value>
void column_sums(const ExecSpace& exec, std::int64_t rows, std::int64_t cols, const Value& value, float* out,
                 float* partial) {
  const std::int64_t chunks = column_sum_chunks(rows);
  const std::int64_t col_blocks = (cols + kSumBlockCols - 1) / kSumBlockCols;
  Policy<ExecSpace> policy(exec, static_cast<int>(chunks * col_blocks), team_size<ExecSpace>());
  Kokkos::parallel_for(
      "attnbwd::fp32::column_sums_chunks", policy, KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t chunk = team.league_rank() / col_blocks;
        const std::int64_t c0 = (team.league_rank() % col_blocks) * kSumBlockCols;
        const std::int64_t r0 = chunk * kSumChunkRows;
        const std::int64_t r1 = r0 + kSumChunkRows < rows ? r0 + kSumChunkRows : rows;
        const int nc = static_cast<int>(cols - c0 < kSumBlockCols ? cols - c0 : kSumBlockCols);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](const int j) {
          float s = 0.0f;
          for (std::int64_t r = r0; r < r1; ++r) s += value(r, c0 + j);
          partial[chunk * cols + c0 + j] = s;
        });
      });
  Kokkos::parallel_for(
      "attnbwd::fp32::column_sums_total", Kokkos::RangePolicy<ExecSpace>(exec, 0, cols),
      KOKKOS_LAMBDA(const std::int64_t c) {
        float s = 0.0f;
        for (std::int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
        out[c] = s;
      });
}

}  // namespace attnbwd::portable::fp32
