// Portable vision_mha_norm_backward (spec §4, Molmo 001), fp32 throughout, written once against
// Kokkos:
//   * GEMMs through Kokkos Kernels: dA = dY·Wo, grad_out_weight = dYᵀ·A, dXn = dQKV·Wqkv,
//     grad_qkv_weight = dQKVᵀ·x_norm;
//   * attention backward from the given P as two TeamPolicy kernels with scratch tiles: one team
//     per (batch·head, block of query rows) for r = rowsum(dP⊙P) and dQ, one per (batch·head, block
//     of key rows) for dV and dK. Both recompute dP = dO·Vᵀ tile by tile, so neither dP nor dS is
//     ever stored (P alone is [B,H,577,577], up to 1.2 GB);
//   * LayerNorm backward (σ² quirk) with the residual add, one team per token;
//   * deterministic column sums for the bias, γ and β gradients.
#include <cstdint>

#include "portable/common.hpp"
#include "portable/fp32_column_sums.hpp"
#include "portable/fp32_team.hpp"
#include "portable/portable.hpp"

namespace attnbwd::portable {
namespace vision_mha_detail {

using namespace fp32;

// Scratch of a query-block team: its dO rows, one streamed V and K tile, the dS tile, the dQ
// accumulator and the row terms r.
struct QueryTiles {
  float *dO, *V, *K, *dS, *dQ, *r;
  KOKKOS_INLINE_FUNCTION QueryTiles(Carve& c, int bq, int bk, int ld)
      : dO(c.take(bq * ld)), V(c.take(bk * ld)), K(c.take(bk * ld)), dS(c.take(bq * bk)),
        dQ(c.take(bq * ld)), r(c.take(bq)) {}
};

// dQ rows of dQKV and r = rowsum(dP⊙P) per query row. For its block of query rows a team streams
// the key tiles twice: first for r (which needs whole rows of dP), then for dS = P⊙(dP − r) and
// dQ = (dS·K)·scale.
template <class ExecSpace>
void query_blocks(const ExecSpace& exec, const VisionMhaShape& s, const VisionMhaArgs& a, const float* dA,
                  float* dqkv, float* rowsum) {
  const int D = static_cast<int>(s.head_dim), ld = padded(D);
  const std::int64_t S = s.seq_len, E = s.embed_dim, H = s.num_heads;
  const TilePlan plan = plan_tiles<ExecSpace>([&](int bq, int bk) { return floats_of<QueryTiles>(bq, bk, ld); });
  const std::int64_t blocks = (S + plan.block - 1) / plan.block;
  const float *P = a.attn_weights.data, *K = a.k.data, *V = a.v.data;
  const float scale = static_cast<float>(a.scale);
  Kokkos::parallel_for(
      "attnbwd::vision_mha::query_blocks", team_policy(exec, s.batch * H * blocks, plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t bh = team.league_rank() / blocks, b = bh / H, h = bh % H;
        const std::int64_t i0 = (team.league_rank() % blocks) * plan.block;
        const int mq = static_cast<int>(S - i0 < plan.block ? S - i0 : plan.block);
        Carve carve{team_floats<ExecSpace>(team, plan)};
        const QueryTiles t(carve, plan.block, plan.tile, ld);
        const float* Pi = P + (bh * S + i0) * S;  // this block's rows of P
        const float* Kh = K + bh * S * D;
        const float* Vh = V + bh * S * D;
        load_rows(team, mq, D, dA + (b * S + i0) * E + h * D, E, t.dO, ld);  // heads split in place
        fill(team, mq, t.r, 0.0f);
        fill(team, plan.block * ld, t.dQ, 0.0f);

        // Pass 1: r_i = Σ_j P_ij·(dO_i·V_j).
        for (std::int64_t j0 = 0; j0 < S; j0 += plan.tile) {
          const int mk = static_cast<int>(S - j0 < plan.tile ? S - j0 : plan.tile);
          load_rows(team, mk, D, Vh + j0 * D, D, t.V, ld);
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
            const int i = idx / mk, j = idx % mk;
            t.dS[i * mk + j] = Pi[i * S + j0 + j] * dot(t.dO + i * ld, t.V + j * ld, D);
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq), [&](const int i) {
            float sum = t.r[i];
            for (int j = 0; j < mk; ++j) sum += t.dS[i * mk + j];
            t.r[i] = sum;
          });
        }
        team.team_barrier();

        // Pass 2: dS = P⊙(dP − r), dQ += dS·K.
        for (std::int64_t j0 = 0; j0 < S; j0 += plan.tile) {
          const int mk = static_cast<int>(S - j0 < plan.tile ? S - j0 : plan.tile);
          load_rows(team, mk, D, Vh + j0 * D, D, t.V, ld);
          load_rows(team, mk, D, Kh + j0 * D, D, t.K, ld);
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
            const int i = idx / mk, j = idx % mk;
            const float dp = dot(t.dO + i * ld, t.V + j * ld, D);
            t.dS[i * mk + j] = Pi[i * S + j0 + j] * (dp - t.r[i]);
          });
          team.team_barrier();
          acc_ab(team, mq, D, mk, t.dS, mk, t.K, ld, t.dQ, ld);
          team.team_barrier();
        }
        // dQ = (dS·K)·scale: the GEMM first, then the scale (spec §4 quirk d).
        store_rows(team, mq, D, t.dQ, ld, dqkv + (b * S + i0) * 3 * E + h * D, 3 * E, scale);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq),
                             [&](const int i) { rowsum[bh * S + i0 + i] = t.r[i]; });
      });
}

// Scratch of a key-block team: its V rows and dV, dK accumulators, then per streamed query tile the
// dO rows, the Q·scale rows, the P and dS tiles and r.
struct KeyTiles {
  float *V, *dV, *dK, *dO, *Q, *P, *dS, *r;
  KOKKOS_INLINE_FUNCTION KeyTiles(Carve& c, int bk, int bq, int ld)
      : V(c.take(bk * ld)), dV(c.take(bk * ld)), dK(c.take(bk * ld)), dO(c.take(bq * ld)), Q(c.take(bq * ld)),
        P(c.take(bq * bk)), dS(c.take(bq * bk)), r(c.take(bq)) {}
};

// dV = Pᵀ·dO and dK = dSᵀ·(Q·scale) rows of dQKV: a team owns a block of key rows and streams the
// query tiles, recomputing dS = P⊙(dO·Vᵀ − r) from the r of query_blocks.
template <class ExecSpace>
void key_blocks(const ExecSpace& exec, const VisionMhaShape& s, const VisionMhaArgs& a, const float* dA,
                const float* rowsum, float* dqkv) {
  const int D = static_cast<int>(s.head_dim), ld = padded(D);
  const std::int64_t S = s.seq_len, E = s.embed_dim, H = s.num_heads;
  const TilePlan plan = plan_tiles<ExecSpace>([&](int bk, int bq) { return floats_of<KeyTiles>(bk, bq, ld); });
  const std::int64_t blocks = (S + plan.block - 1) / plan.block;
  const float *P = a.attn_weights.data, *Q = a.q.data, *V = a.v.data;
  const float scale = static_cast<float>(a.scale);
  Kokkos::parallel_for(
      "attnbwd::vision_mha::key_blocks", team_policy(exec, s.batch * H * blocks, plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t bh = team.league_rank() / blocks, b = bh / H, h = bh % H;
        const std::int64_t j0 = (team.league_rank() % blocks) * plan.block;
        const int mk = static_cast<int>(S - j0 < plan.block ? S - j0 : plan.block);
        Carve carve{team_floats<ExecSpace>(team, plan)};
        const KeyTiles t(carve, plan.block, plan.tile, ld);
        const float* Ph = P + bh * S * S;
        const float* dO = dA + b * S * E + h * D;  // row stride E
        load_rows(team, mk, D, V + (bh * S + j0) * D, D, t.V, ld);
        fill(team, plan.block * ld, t.dV, 0.0f);
        fill(team, plan.block * ld, t.dK, 0.0f);

        for (std::int64_t i0 = 0; i0 < S; i0 += plan.tile) {
          const int mq = static_cast<int>(S - i0 < plan.tile ? S - i0 : plan.tile);
          team.team_barrier();  // the previous tile's products are done with dO, Q, P, dS
          load_rows(team, mq, D, dO + i0 * E, E, t.dO, ld);
          load_rows(team, mq, D, Q + (bh * S + i0) * D, D, t.Q, ld, scale);  // Q·scale first (quirk d)
          load_rows(team, mq, mk, Ph + i0 * S + j0, S, t.P, mk);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq),
                               [&](const int i) { t.r[i] = rowsum[bh * S + i0 + i]; });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
            const int i = idx / mk, j = idx % mk;
            const float dp = dot(t.dO + i * ld, t.V + j * ld, D);
            t.dS[i * mk + j] = t.P[i * mk + j] * (dp - t.r[i]);
          });
          team.team_barrier();
          acc_atb(team, mk, D, mq, t.P, mk, t.dO, ld, t.dV, ld);
          acc_atb(team, mk, D, mq, t.dS, mk, t.Q, ld, t.dK, ld);
        }
        team.team_barrier();
        float* row = dqkv + (b * S + j0) * 3 * E + h * D;
        store_rows(team, mk, D, t.dK, ld, row + E, 3 * E);
        store_rows(team, mk, D, t.dV, ld, row + 2 * E, 3 * E);
      });
}

// grad_x = dY + g/σ − mean(g/σ) − xc·mean(g⊙xc)/σ² per token (g = dXn⊙γ, xc = x − x_mean,
// σ = √(x_var + eps)): σ², not the textbook σ³, is the reference's quirk (spec §4 a).
template <class ExecSpace>
void layer_norm(const ExecSpace& exec, const VisionMhaShape& s, const VisionMhaArgs& a, const float* dXn) {
  const std::int64_t E = s.embed_dim;
  TilePlan plan;
  plan.floats = static_cast<std::size_t>(2 * E);  // g and xc of the token
  plan.level = ScratchFloats<ExecSpace>::shmem_size(plan.floats) <=
                       static_cast<std::size_t>(Policy<ExecSpace>::scratch_size_max(0))
                   ? 0
                   : 1;
  const float *dY = a.grad_output.data, *x = a.x.data, *mean = a.x_mean.data, *var = a.x_var.data,
              *gamma = a.ln_weight.data;
  const float eps = static_cast<float>(a.norm_eps);
  const float inv_E = 1.0f / static_cast<float>(E);
  float* gx = a.grad_x.data;
  Kokkos::parallel_for(
      "attnbwd::vision_mha::layer_norm", team_policy(exec, s.tokens(), plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t n = team.league_rank();
        Carve carve{team_floats<ExecSpace>(team, plan)};
        float* g = carve.take(E);
        float* xc = carve.take(E);
        const float sigma = sqrt_f(var[n] + eps);
        const float mu = mean[n];
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int>(E)), [&](const int e) {
          xc[e] = x[n * E + e] - mu;
          g[e] = dXn[n * E + e] * gamma[e];
        });
        team.team_barrier();
        float sum_gs = 0.0f, sum_gxc = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, static_cast<int>(E)),
            [&](const int e, float& acc) { acc += g[e] / sigma; }, sum_gs);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, static_cast<int>(E)),
            [&](const int e, float& acc) { acc += g[e] * xc[e]; }, sum_gxc);
        const float mean_gs = sum_gs * inv_E;
        const float quirk = (sum_gxc * inv_E) / (sigma * sigma);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int>(E)), [&](const int e) {
          gx[n * E + e] = dY[n * E + e] + (g[e] / sigma - mean_gs - xc[e] * quirk);
        });
      });
}

// dXn⊙x̂ with x̂ = (x − x_mean)/σ recomputed (x_norm is not used here, as in the reference).
struct LnWeightTerm {
  const float *dXn, *x, *mean, *var;
  std::int64_t E;
  float eps;
  KOKKOS_INLINE_FUNCTION float operator()(std::int64_t r, std::int64_t c) const {
    return dXn[r * E + c] * ((x[r * E + c] - mean[r]) / sqrt_f(var[r] + eps));
  }
};

}  // namespace vision_mha_detail

template <class ExecSpace>
void vision_mha_norm_backward(const ExecSpace& exec, const VisionMhaShape& s, const VisionMhaArgs& a,
                              const Options&) {
  using namespace vision_mha_detail;
  const std::int64_t N = s.tokens(), E = s.embed_dim, E3 = s.qkv_dim();
  auto dA = workspace<float>(exec, "attnbwd::vision_mha::dA_then_dXn", N * E);
  auto dqkv = workspace<float>(exec, "attnbwd::vision_mha::dQKV", N * E3);
  auto rowsum = workspace<float>(exec, "attnbwd::vision_mha::rowsum", s.batch * s.num_heads * s.seq_len);
  auto partial = workspace<float>(exec, "attnbwd::vision_mha::column_sums", column_sum_workspace(N, E3));
  const float* dY = a.grad_output.data;

  // 1. Output projection.
  gemm(exec, false, false, N, E, E, 1.0f, dY, a.out_weight.data, 0.0f, dA.data());
  gemm(exec, true, false, E, E, N, 1.0f, dY, a.attn_output.data, 0.0f, a.grad_out_weight.data);
  column_sums(exec, N, E, Elements{dY, E}, a.grad_out_bias.data, partial.data());

  // 2-6. Attention backward into dQKV = [dQ | dK | dV].
  query_blocks(exec, s, a, dA.data(), dqkv.data(), rowsum.data());
  key_blocks(exec, s, a, dA.data(), rowsum.data(), dqkv.data());

  // 7. QKV projection; dA is dead now, its buffer takes dXn.
  float* dXn = dA.data();
  gemm(exec, false, false, N, E, E3, 1.0f, dqkv.data(), a.qkv_weight.data, 0.0f, dXn);
  gemm(exec, true, false, E3, E, N, 1.0f, dqkv.data(), a.x_norm.data, 0.0f, a.grad_qkv_weight.data);
  column_sums(exec, N, E3, Elements{dqkv.data(), E3}, a.grad_qkv_bias.data, partial.data());

  // 8. LayerNorm and residual.
  layer_norm(exec, s, a, dXn);
  column_sums(exec, N, E, Elements{dXn, E}, a.grad_ln_bias.data, partial.data());
  const LnWeightTerm ln_weight_term{dXn, a.x.data, a.x_mean.data, a.x_var.data, E, static_cast<float>(a.norm_eps)};
  column_sums(exec, N, E, ln_weight_term, a.grad_ln_weight.data, partial.data());

  // The workspace is freed on return; the kernels using it must be done by then.
  exec.fence();
}

ATTNBWD_PORTABLE_INSTANTIATE(vision_mha_norm_backward, VisionMhaShape, VisionMhaArgs)

}  // namespace attnbwd::portable
