// Team-level building blocks of the fp32 portable kernels (vision_mha_norm_backward,
// vision_varlen_rope_backward): team policies, scratch planning, and small tile products on
// team-scratch tiles with fp32 accumulation. Everything here is written once against Kokkos.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace attnbwd::portable::fp32 {

// Device-callable exp and sqrt: Kokkos::exp arrived in Kokkos 3.7; before it the C functions are
// the portable choice (CUDA declares them for device code too).
KOKKOS_INLINE_FUNCTION float exp_f(float x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::exp(x);
#else
  return ::expf(x);
#endif
}
KOKKOS_INLINE_FUNCTION float sqrt_f(float x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::sqrt(x);
#else
  return ::sqrtf(x);
#endif
}

template <class ExecSpace>
using Policy = Kokkos::TeamPolicy<ExecSpace>;
template <class ExecSpace>
using Member = typename Policy<ExecSpace>::member_type;
template <class ExecSpace>
using ScratchFloats =
    Kokkos::View<float*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecSpace>
constexpr bool host_space() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}

// On a host space one thread runs a team, so the league spreads over the cores and a team's
// loops are plain serial loops over its tiles; on a GPU a team is a block of 128 threads.
template <class ExecSpace>
constexpr int team_size() {
  return host_space<ExecSpace>() ? 1 : 128;
}

// Where one kernel's team scratch lives and how big its tiles are: `block` rows owned by the team,
// `tile` rows of the operand it streams through.
struct TilePlan {
  int block = 0, tile = 0;
  int level = 0;                // 0: fast scratch; 1: the space's larger (global-memory) scratch
  std::size_t floats = 0;       // scratch size in floats
};

// The first (block, tile) pair, largest first, whose scratch fits in level 0; else level 1 (head
// dims far beyond the benchmark's 64/128). `floats_for(block, tile)` gives a candidate's size.
template <class ExecSpace, class FloatsFor>
TilePlan plan_tiles(FloatsFor floats_for) {
  constexpr int kCandidates[][2] = {{32, 32}, {32, 16}, {16, 16}, {16, 8}, {8, 8}, {8, 4}, {4, 4}};
  const std::size_t level0 = static_cast<std::size_t>(Policy<ExecSpace>::scratch_size_max(0));
  for (const auto& c : kCandidates) {
    const std::size_t n = floats_for(c[0], c[1]);
    if (ScratchFloats<ExecSpace>::shmem_size(n) <= level0) return {c[0], c[1], 0, n};
  }
  return {16, 16, 1, floats_for(16, 16)};
}

template <class ExecSpace>
Policy<ExecSpace> team_policy(const ExecSpace& exec, std::int64_t league, const TilePlan& plan) {
  Policy<ExecSpace> p(exec, static_cast<int>(league), team_size<ExecSpace>());
  p.set_scratch_size(plan.level, Kokkos::PerTeam(ScratchFloats<ExecSpace>::shmem_size(plan.floats)));
  return p;
}

// The team's whole scratch as one float array, carved into tiles by `Carve`.
template <class ExecSpace>
KOKKOS_INLINE_FUNCTION float* team_floats(const Member<ExecSpace>& team, const TilePlan& plan) {
  return ScratchFloats<ExecSpace>(team.team_scratch(plan.level), plan.floats).data();
}

// Hands out consecutive float ranges of a base pointer. With a null base it only counts, so a
// kernel's tile list is written once and used both to size the scratch (host) and to carve it.
struct Carve {
  float* base = nullptr;
  std::size_t used = 0;
  KOKKOS_INLINE_FUNCTION float* take(std::int64_t n) {
    float* p = base ? base + used : nullptr;
    used += static_cast<std::size_t>(n);
    return p;
  }
};

// Floats a scratch layout `Tiles` (constructed from a Carve and its dimensions) takes: built once on a
// counting Carve, so the count can never disagree with the layout the kernel carves.
template <class Tiles, class... Dims>
std::size_t floats_of(Dims... dims) {
  Carve c;
  const Tiles layout(c, dims...);
  (void)layout;
  return c.used;
}

// Row stride of a scratch tile holding rows of head_dim floats: one spare float so that threads
// reading the same column of consecutive rows hit different shared-memory banks.
KOKKOS_INLINE_FUNCTION int padded(std::int64_t head_dim) { return static_cast<int>(head_dim) + 1; }

// ---- Team-wide tile operations (every thread of the team calls them; no barrier inside)

// dst[r, c] = alpha·src[r, c] for r < rows, c < cols; src has row stride `lds` (global memory).
template <class TeamMember>
KOKKOS_INLINE_FUNCTION void load_rows(const TeamMember& team, int rows, int cols, const float* src,
                                      std::int64_t lds, float* dst, int ldd, float alpha = 1.0f) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * cols), [&](const int idx) {
    const int r = idx / cols, c = idx % cols;
    dst[r * ldd + c] = alpha * src[r * lds + c];
  });
}

// dst[r, c] = alpha·src[r, c] into global memory with row stride `ldd`.
template <class TeamMember>
KOKKOS_INLINE_FUNCTION void store_rows(const TeamMember& team, int rows, int cols, const float* src,
                                       int lds, float* dst, std::int64_t ldd, float alpha = 1.0f) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * cols), [&](const int idx) {
    const int r = idx / cols, c = idx % cols;
    dst[r * ldd + c] = alpha * src[r * lds + c];
  });
}

template <class TeamMember>
KOKKOS_INLINE_FUNCTION void fill(const TeamMember& team, int n, float* dst, float value) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) { dst[i] = value; });
}

// Dot product of two scratch rows of length k, in index order.
KOKKOS_INLINE_FUNCTION float dot(const float* a, const float* b, int k) {
  float s = 0.0f;
  for (int d = 0; d < k; ++d) s += a[d] * b[d];
  return s;
}

// C[i, j] += Σ_l A[i, l]·B[l, j] for i < m, j < n (C and B rows of head_dim, A an m×k tile).
template <class TeamMember>
KOKKOS_INLINE_FUNCTION void acc_ab(const TeamMember& team, int m, int n, int k, const float* A, int lda,
                                   const float* B, int ldb, float* C, int ldc) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, m * n), [&](const int idx) {
    const int i = idx / n, j = idx % n;
    float s = C[i * ldc + j];
    for (int l = 0; l < k; ++l) s += A[i * lda + l] * B[l * ldb + j];
    C[i * ldc + j] = s;
  });
}

// C[i, j] += Σ_l A[l, i]·B[l, j] for i < m, j < n: the transposed-tile product (Pᵀ·dO, dSᵀ·Q).
template <class TeamMember>
KOKKOS_INLINE_FUNCTION void acc_atb(const TeamMember& team, int m, int n, int k, const float* A, int lda,
                                    const float* B, int ldb, float* C, int ldc) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, m * n), [&](const int idx) {
    const int i = idx / n, j = idx % n;
    float s = C[i * ldc + j];
    for (int l = 0; l < k; ++l) s += A[l * lda + i] * B[l * ldb + j];
    C[i * ldc + j] = s;
  });
}

}  // namespace attnbwd::portable::fp32
