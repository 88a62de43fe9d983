// Steps 2-8 of gqa_rope_backward (spec §3) as Kokkos TeamPolicy kernels with team scratch: the
// attention backward from the given P with GQA and RoPE, fused with the head split of dA and the
// head merge of dQ, dK, dV. The per-head GEMMs (S×S×D) run inside the kernels on scratch tiles with
// fp32 accumulation and one bf16 rounding per result element, as the reference's bf16 GEMMs do.
//
//  query_side: one team per (b, query head h, block of query rows):
//    dP = bf16(dO·Vᵀ), r = Σ P·dP (fp32), dS = bf16(bf16(P(dP − r))·scaling), dQ = bf16(dS·K),
//    RoPE(dQ) -> dQp. dS is stored (bf16) for key_side.
//  key_side<true/false>: one team per (b, KV head j, block of key rows), looping over the group's
//    query heads, so the GQA sum needs no atomics (and is deterministic):
//    dK = bf16(Σ_g bf16(dSᵀ·Q)), RoPE(dK) -> dKp;   dV = bf16(Σ_g bf16(Pᵀ·dO)) -> dVp.
//    dK and dV are separate launches: each then holds two [keys,D] accumulators, not four, which
//    keeps its tiles in the 32-40 KiB of level-0 scratch Kokkos 3.4 grants; each input tile is still
//    read by one launch only (Q, dS by the dK one; dO, P by the dV one).
//
// Tiles: rows of dO/Q and keys of K/V are staged as floats; a key tile's rows are padded to D+1 so
// that threads reading one column of different key rows hit different shared-memory banks on GPUs.
// Tails (S not a multiple of a tile) are handled by partial tiles.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>

#include "attnbwd/bf16.hpp"
#include "portable/bf16_ops.hpp"

namespace attnbwd::portable::bf16_attention {

using bf16_ops::rope_backward;
using bf16_ops::round_bf16;
using bf16_ops::softmax_grad;


// What the attention kernels read and write. dA, dQp, dKp, dVp are [T, ·] row-major (token
// t = b·S+s, feature h·D+d) holding bf16-exact floats; the head tensors are [B,Hq,S,D], P and dS
// [B,Hq,S,S]; cos, sin [B,S,D].
struct AttentionOperands {
  std::int64_t batch, seq_len, num_heads, num_kv_heads, head_dim;
  const float* dA;  // bf16(dY·Wo), [T, Hq·D]
  const bf16 *P, *Q, *K, *V, *cos, *sin;
  float scaling;
  bf16* dS;    // workspace [B,Hq,S,S]: dP first, then dS
  float* dQp;  // [T, Hq·D]
  float* dKp;  // [T, Hkv·D]
  float* dVp;  // [T, Hkv·D]
};

// Tile sizes of one kernel and the team scratch they take.
struct Tiles {
  int rows, keys, level;
  std::size_t bytes;
};

// Halves the larger tile side until `bytes(rows, keys)` fits level-0 scratch; falls back to the
// requested tiles in level-1 scratch (global memory on GPUs) when even 1×1 does not fit.
template <class Policy, class Bytes>
Tiles fit_tiles(const Policy& policy, int rows, int keys, const Bytes& bytes) {
  const std::size_t cap = static_cast<std::size_t>(policy.scratch_size_max(0));
  Tiles t{rows, keys, 0, bytes(rows, keys)};
  while (t.bytes > cap && (t.rows > 1 || t.keys > 1)) {
    if (t.rows >= t.keys) t.rows /= 2;
    else t.keys /= 2;
    t.bytes = bytes(t.rows, t.keys);
  }
  if (t.bytes > cap) t = Tiles{rows, keys, 1, bytes(rows, keys)};
  return t;
}

template <class ExecSpace>
using ScratchFloats =
    Kokkos::View<float*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecSpace>
void query_side(const ExecSpace& exec, const AttentionOperands& o) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Scratch = ScratchFloats<ExecSpace>;
  const int D = static_cast<int>(o.head_dim), ldk = D + 1;
  const std::int64_t S = o.seq_len, Hq = o.num_heads, QP = Hq * o.head_dim;
  // dO rows, dQ accumulator, one key tile (V, then K), the dP/dS tile, r.
  const auto bytes = [=](int rows, int keys) {
    return 2 * Scratch::shmem_size(rows * D) + Scratch::shmem_size(keys * ldk) +
           Scratch::shmem_size(rows * keys) + Scratch::shmem_size(rows);
  };
  const Tiles t = fit_tiles(Policy(exec, 1, Kokkos::AUTO), 16, 32, bytes);
  const int BQ = t.rows, BK = t.keys, level = t.level;
  const std::int64_t blocks = (S + BQ - 1) / BQ;
  Policy policy(exec, static_cast<int>(o.batch * Hq * blocks), Kokkos::AUTO);
  policy.set_scratch_size(level, Kokkos::PerTeam(t.bytes));

  Kokkos::parallel_for(
      "attnbwd::gqa_rope_backward::query_side", policy, KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t bh = team.league_rank() / blocks, b = bh / Hq, h = bh % Hq;
        const std::int64_t i0 = (team.league_rank() % blocks) * BQ;
        const int rows = static_cast<int>(S - i0 < BQ ? S - i0 : BQ);
        const std::int64_t head = bh * S;  // first row of this head in [B,Hq,S,·] tensors
        Scratch dO(team.team_scratch(level), BQ * D), dQ(team.team_scratch(level), BQ * D),
            kv(team.team_scratch(level), BK * ldk), tile(team.team_scratch(level), BQ * BK),
            r(team.team_scratch(level), BQ);

        const float* dA_rows = o.dA + (b * S + i0) * QP + h * D;  // head split of dA (step 2)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * D), [&](const int e) {
          dO(e) = dA_rows[(e / D) * QP + e % D];
          dQ(e) = 0.0f;
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) { r(i) = 0.0f; });
        // Stages `keys` rows of a head tensor into the padded key tile.
        const auto load_keys = [&](const bf16* src, const int keys) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D), [&](const int e) {
            kv((e / D) * ldk + e % D) = src[e].to_float();
          });
        };

        // Pass 1: dP = bf16(dO·Vᵀ) (kept in the dS workspace) and r = Σ_j P·dP.
        for (std::int64_t j0 = 0; j0 < S; j0 += BK) {
          const int keys = static_cast<int>(S - j0 < BK ? S - j0 : BK);
          team.team_barrier();
          load_keys(o.V + (head + j0) * D, keys);
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * keys), [&](const int e) {
            const int i = e / keys, j = e % keys;
            float acc = 0.0f;
            for (int d = 0; d < D; ++d) acc += dO(i * D + d) * kv(j * ldk + d);
            const std::int64_t at = (head + i0 + i) * S + j0 + j;
            const bf16 dp(acc);
            o.dS[at] = dp;
            tile(i * BK + j) = o.P[at].to_float() * dp.to_float();  // exact in fp32
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
            float sum = 0.0f;
            for (int j = 0; j < keys; ++j) sum += tile(i * BK + j);
            r(i) += sum;
          });
        }

        // Pass 2: dS from P, dP and r (stored over dP), and dQ += dS·K tile by tile.
        for (std::int64_t j0 = 0; j0 < S; j0 += BK) {
          const int keys = static_cast<int>(S - j0 < BK ? S - j0 : BK);
          team.team_barrier();
          load_keys(o.K + (head + j0) * D, keys);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * keys), [&](const int e) {
            const int i = e / keys, j = e % keys;
            const std::int64_t at = (head + i0 + i) * S + j0 + j;
            const float ds = softmax_grad(o.P[at].to_float(), o.dS[at].to_float(), r(i), o.scaling);
            o.dS[at] = bf16(ds);
            tile(i * BK + j) = ds;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * D), [&](const int e) {
            const int i = e / D, d = e % D;
            float acc = dQ(e);
            for (int j = 0; j < keys; ++j) acc += tile(i * BK + j) * kv(j * ldk + d);
            dQ(e) = acc;
          });
        }

        // dQ = bf16(dS·K); RoPE backward; merged into dQp[t, h·D + d] (steps 7, 8).
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * D),
                             [&](const int e) { dQ(e) = round_bf16(dQ(e)); });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * D), [&](const int e) {
          const int i = e / D, d = e % D;
          const std::int64_t tok = b * S + i0 + i;
          o.dQp[tok * QP + h * D + d] =
              rope_backward(dQ.data() + i * D, o.cos + tok * D, o.sin + tok * D, d, D / 2);
        });
      });
}

// kKeys: dK = bf16(Σ_g bf16(dSᵀ·Q)) with RoPE, into dKp. Otherwise dV = bf16(Σ_g bf16(Pᵀ·dO)),
// into dVp. Both are W_hᵀ·X_h summed over the group's heads h, with (W, X) = (dS, Q) or (P, dO).
template <bool kKeys, class ExecSpace>
void key_side(const ExecSpace& exec, const AttentionOperands& o) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Scratch = ScratchFloats<ExecSpace>;
  const int D = static_cast<int>(o.head_dim);
  const std::int64_t S = o.seq_len, Hq = o.num_heads, Hkv = o.num_kv_heads, G = Hq / Hkv;
  const std::int64_t QP = Hq * o.head_dim, KP = Hkv * o.head_dim;
  // X rows, W tile, the head's and the group's [keys, D] accumulators.
  const auto bytes = [=](int rows, int keys) {
    return Scratch::shmem_size(rows * D) + Scratch::shmem_size(rows * keys) + 2 * Scratch::shmem_size(keys * D);
  };
  const Tiles t = fit_tiles(Policy(exec, 1, Kokkos::AUTO), 32, 16, bytes);
  const int BQ = t.rows, BK = t.keys, level = t.level;
  const std::int64_t blocks = (S + BK - 1) / BK;
  Policy policy(exec, static_cast<int>(o.batch * Hkv * blocks), Kokkos::AUTO);
  policy.set_scratch_size(level, Kokkos::PerTeam(t.bytes));

  Kokkos::parallel_for(
      kKeys ? "attnbwd::gqa_rope_backward::key_side_dK" : "attnbwd::gqa_rope_backward::key_side_dV", policy,
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t bj = team.league_rank() / blocks, b = bj / Hkv, j = bj % Hkv;
        const std::int64_t k0 = (team.league_rank() % blocks) * BK;
        const int keys = static_cast<int>(S - k0 < BK ? S - k0 : BK);
        Scratch X(team.team_scratch(level), BQ * D), W(team.team_scratch(level), BQ * BK),
            acc(team.team_scratch(level), BK * D), group(team.team_scratch(level), BK * D);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D), [&](const int e) {
          acc(e) = 0.0f;
          group(e) = 0.0f;
        });

        for (std::int64_t h = j * G; h < (j + 1) * G; ++h) {  // query heads sharing KV head j
          const std::int64_t head = (b * Hq + h) * S;
          for (std::int64_t i0 = 0; i0 < S; i0 += BQ) {
            const int rows = static_cast<int>(S - i0 < BQ ? S - i0 : BQ);
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * D), [&](const int e) {
              const int i = e / D, d = e % D;
              X(e) = kKeys ? o.Q[(head + i0 + i) * D + d].to_float() : o.dA[(b * S + i0 + i) * QP + h * D + d];
            });
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * keys), [&](const int e) {
              const int i = e / keys, k = e % keys;
              const std::int64_t at = (head + i0 + i) * S + k0 + k;
              W(i * BK + k) = (kKeys ? o.dS[at] : o.P[at]).to_float();
            });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D), [&](const int e) {
              const int k = e / D, d = e % D;
              float a = acc(e);
              for (int i = 0; i < rows; ++i) a += W(i * BK + k) * X(i * D + d);
              acc(e) = a;
            });
          }
          // This head's bf16 GEMM result, summed in fp32 over the group (step 6).
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D), [&](const int e) {
            group(e) += round_bf16(acc(e));
            acc(e) = 0.0f;
          });
        }

        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D),
                             [&](const int e) { group(e) = round_bf16(group(e)); });
        team.team_barrier();
        float* out = kKeys ? o.dKp : o.dVp;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys * D), [&](const int e) {
          const int k = e / D, d = e % D;
          const std::int64_t tok = b * S + k0 + k;
          out[tok * KP + j * D + d] =
              kKeys ? rope_backward(group.data() + k * D, o.cos + tok * D, o.sin + tok * D, d, D / 2) : group(e);
        });
      });
}

}  // namespace attnbwd::portable::bf16_attention
