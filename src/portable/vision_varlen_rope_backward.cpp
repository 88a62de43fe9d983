// Portable vision_varlen_rope_backward (spec §5, Qwen3-VL 017), fp32 throughout, written once
// against Kokkos:
//   * GEMMs through Kokkos Kernels: the forward QKV = X·Wqkvᵀ, dAO = dY·Wp, grad_proj_weight =
//     dYᵀ·AO, grad_hidden_states = dQKV·Wqkv, grad_qkv_weight = dQKVᵀ·X;
//   * TeamPolicy kernels with scratch tiles: bias + RoPE on q and k (one team per token); the
//     block-diagonal attention as one team per (block of query tokens, head) for the forward (online
//     softmax: O and the row statistics m, l) and dQ', and one per (block of key tokens, head) for
//     dK' and dV, P recomputed from the statistics (never stored, so any sequence length fits), the
//     RoPE backward fused into both;
//   * deterministic column sums for the bias gradients.
//
// Sequences come only from the device cu_seqlens: blocks are cut from the packed token axis, and a
// team walks the sequences its block intersects (binary search for the first), so no host copy is
// needed and a block never mixes tokens of two sequences in one tile. Empty sequences own no tokens
// and are never visited.
#include <cstdint>

#include "portable/common.hpp"
#include "portable/fp32_column_sums.hpp"
#include "portable/fp32_team.hpp"
#include "portable/portable.hpp"

namespace attnbwd::portable {
namespace vision_varlen_detail {

using namespace fp32;

// The sequence holding token t (0 <= t < S): the last i < n with cu[i] <= t. Then cu[i+1] > t, so
// empty sequences (cu[i] == cu[i+1]) are skipped.
KOKKOS_INLINE_FUNCTION std::int64_t sequence_of(const std::int32_t* cu, std::int64_t n, std::int64_t t) {
  std::int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Calls f(first, count, seq_begin, seq_len) for each piece of the token range [t0, t1) that lies in
// one sequence, in token order. Every thread of a team calls it alike.
template <class F>
KOKKOS_INLINE_FUNCTION void for_each_segment(const std::int32_t* cu, std::int64_t n, std::int64_t t0,
                                             std::int64_t t1, F&& f) {
  for (std::int64_t t = t0; t < t1;) {
    const std::int64_t seq = sequence_of(cu, n, t);
    const std::int64_t begin = cu[seq], end = cu[seq + 1];
    const std::int64_t stop = end < t1 ? end : t1;
    f(t, static_cast<int>(stop - t), begin, end - begin);
    t = stop;
  }
}

// g ← g⊙c + rotᵀ(g⊙s), rotᵀ(y) = [y_hi, −y_lo], on `rows` scratch rows of D (pairs i, i + D/2),
// written to global rows of stride `ldd`; c, s are the tokens' cos/sin rows (stride D).
template <class TeamMember>
KOKKOS_INLINE_FUNCTION void rope_backward_store(const TeamMember& team, int rows, int D, const float* g, int ldg,
                                                const float* cos, const float* sin, float* dst,
                                                std::int64_t ldd) {
  const int half = D / 2;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * half), [&](const int idx) {
    const int i = idx / half, p = idx % half;
    const float lo = g[i * ldg + p], hi = g[i * ldg + p + half];
    const float* c = cos + static_cast<std::int64_t>(i) * D;
    const float* s = sin + static_cast<std::int64_t>(i) * D;
    dst[i * ldd + p] = lo * c[p] + hi * s[p + half];
    dst[i * ldd + p + half] = hi * c[p + half] - lo * s[p];
  });
}

// QKV ← QKV + b, then q' = q⊙cos + rot(q)⊙sin, rot(x) = [−x_hi, x_lo], on the q and k thirds; one
// team per token with the token's cos/sin row in scratch (shared by all 2H rotated heads).
template <class ExecSpace>
void bias_rope(const ExecSpace& exec, const VisionVarlenShape& s, const VisionVarlenArgs& a, float* qkv) {
  const std::int64_t C = s.hidden_size, C3 = s.qkv_out_size(), H = s.num_heads;
  const int D = static_cast<int>(s.head_dim), half = D / 2;
  TilePlan plan;
  plan.floats = static_cast<std::size_t>(2 * D);
  plan.level = ScratchFloats<ExecSpace>::shmem_size(plan.floats) <=
                       static_cast<std::size_t>(Policy<ExecSpace>::scratch_size_max(0))
                   ? 0
                   : 1;
  const float *bias = a.qkv_bias.data, *cos = a.cos.data, *sin = a.sin.data;
  Kokkos::parallel_for(
      "attnbwd::vision_varlen::bias_rope", team_policy(exec, s.total_seq_len, plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t t = team.league_rank();
        Carve carve{team_floats<ExecSpace>(team, plan)};
        float* c = carve.take(D);
        float* sn = carve.take(D);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D), [&](const int i) {
          c[i] = cos[t * D + i];
          sn[i] = sin[t * D + i];
        });
        team.team_barrier();
        float* row = qkv + t * C3;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int>(2 * H) * half), [&](const int idx) {
          const std::int64_t col = (idx / half) * D + idx % half;  // q heads, then k heads (C = H·D)
          const int p = idx % half;
          const float lo = row[col] + bias[col], hi = row[col + half] + bias[col + half];
          row[col] = lo * c[p] - hi * sn[p];
          row[col + half] = hi * c[p + half] + lo * sn[p + half];
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int>(C)),
                             [&](const int i) { row[2 * C + i] += bias[2 * C + i]; });
      });
}

// Row statistics of the recomputed softmax, [3][H][S]: max m, sum l (P = exp(s − m)/l) and the
// softmax-backward row term r = rowsum(dP⊙P) = dO·O.
struct Stats {
  float *m, *l, *r;
};

// Scratch of a query-block team: q' and dO rows, the O then dQ' accumulator, one streamed k' and v
// tile, the score tile and per-row m, l, r and the online-softmax rescale factor.
struct QueryTiles {
  float *Q, *dO, *acc, *K, *V, *T, *m, *l, *r, *alpha;
  KOKKOS_INLINE_FUNCTION QueryTiles(Carve& c, int bq, int bk, int ld)
      : Q(c.take(bq * ld)), dO(c.take(bq * ld)), acc(c.take(bq * ld)), K(c.take(bk * ld)), V(c.take(bk * ld)),
        T(c.take(bq * bk)), m(c.take(bq)), l(c.take(bq)), r(c.take(bq)), alpha(c.take(bq)) {}
};

// Per (query block, head): the forward O = softmax(q'k'ᵀ·scaling)·v with an online softmax (AO and
// m, l written), r = dO·O, then dS = P⊙(dP − r)·scaling and dQ' = dS·k', RoPE-backward into dQKV.
template <class ExecSpace>
void query_blocks(const ExecSpace& exec, const VisionVarlenShape& s, const VisionVarlenArgs& a, const float* qkv,
                  const float* dAO, float* AO, Stats st, float* dqkv) {
  const int D = static_cast<int>(s.head_dim), ld = padded(D);
  const std::int64_t S = s.total_seq_len, C = s.hidden_size, C3 = s.qkv_out_size(), H = s.num_heads;
  const std::int64_t n = s.num_sequences;
  const TilePlan plan = plan_tiles<ExecSpace>([&](int bq, int bk) { return floats_of<QueryTiles>(bq, bk, ld); });
  const std::int64_t blocks = (S + plan.block - 1) / plan.block;
  const std::int32_t* cu = a.cu_seqlens.data;
  const float *cos = a.cos.data, *sin = a.sin.data;
  const float scaling = static_cast<float>(a.scaling);
  const float lowest = Kokkos::reduction_identity<float>::max();  // the identity of max: -FLT_MAX
  Kokkos::parallel_for(
      "attnbwd::vision_varlen::query_blocks", team_policy(exec, blocks * H, plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t h = team.league_rank() % H;
        const std::int64_t t0 = (team.league_rank() / H) * plan.block;
        const std::int64_t t1 = t0 + plan.block < S ? t0 + plan.block : S;
        Carve carve{team_floats<ExecSpace>(team, plan)};
        const QueryTiles t(carve, plan.block, plan.tile, ld);
        for_each_segment(cu, n, t0, t1, [&](std::int64_t q0, int mq, std::int64_t k0, std::int64_t L) {
          team.team_barrier();  // a previous segment may still be reading the tiles
          load_rows(team, mq, D, qkv + q0 * C3 + h * D, C3, t.Q, ld);
          load_rows(team, mq, D, dAO + q0 * C + h * D, C, t.dO, ld);
          fill(team, mq, t.m, lowest);
          fill(team, mq, t.l, 0.0f);
          fill(team, plan.block * ld, t.acc, 0.0f);

          // Forward, online softmax over the key tiles of the sequence.
          for (std::int64_t j0 = k0; j0 < k0 + L; j0 += plan.tile) {
            const int mk = static_cast<int>(k0 + L - j0 < plan.tile ? k0 + L - j0 : plan.tile);
            load_rows(team, mk, D, qkv + j0 * C3 + C + h * D, C3, t.K, ld);
            load_rows(team, mk, D, qkv + j0 * C3 + 2 * C + h * D, C3, t.V, ld);
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
              const int i = idx / mk, j = idx % mk;
              t.T[i * mk + j] = dot(t.Q + i * ld, t.K + j * ld, D) * scaling;
            });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq), [&](const int i) {
              float mx = t.m[i];
              for (int j = 0; j < mk; ++j) mx = t.T[i * mk + j] > mx ? t.T[i * mk + j] : mx;
              float sum = 0.0f;
              for (int j = 0; j < mk; ++j) sum += (t.T[i * mk + j] = exp_f(t.T[i * mk + j] - mx));
              t.alpha[i] = exp_f(t.m[i] - mx);
              t.l[i] = t.l[i] * t.alpha[i] + sum;
              t.m[i] = mx;
            });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * D), [&](const int idx) {
              const int i = idx / D, d = idx % D;
              float o = t.acc[i * ld + d] * t.alpha[i];
              for (int j = 0; j < mk; ++j) o += t.T[i * mk + j] * t.V[j * ld + d];
              t.acc[i * ld + d] = o;
            });
            team.team_barrier();
          }
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * D), [&](const int idx) {
            const int i = idx / D, d = idx % D;
            const float o = t.acc[i * ld + d] / t.l[i];
            t.acc[i * ld + d] = o;
            AO[(q0 + i) * C + h * D + d] = o;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq), [&](const int i) {
            t.r[i] = dot(t.dO + i * ld, t.acc + i * ld, D);
            st.m[h * S + q0 + i] = t.m[i];
            st.l[h * S + q0 + i] = t.l[i];
            st.r[h * S + q0 + i] = t.r[i];
          });
          team.team_barrier();
          fill(team, plan.block * ld, t.acc, 0.0f);

          // Backward: dS = P⊙(dO·vᵀ − r)·scaling, dQ' += dS·k'.
          for (std::int64_t j0 = k0; j0 < k0 + L; j0 += plan.tile) {
            const int mk = static_cast<int>(k0 + L - j0 < plan.tile ? k0 + L - j0 : plan.tile);
            load_rows(team, mk, D, qkv + j0 * C3 + C + h * D, C3, t.K, ld);
            load_rows(team, mk, D, qkv + j0 * C3 + 2 * C + h * D, C3, t.V, ld);
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
              const int i = idx / mk, j = idx % mk;
              const float p = exp_f(dot(t.Q + i * ld, t.K + j * ld, D) * scaling - t.m[i]) / t.l[i];
              const float dp = dot(t.dO + i * ld, t.V + j * ld, D);
              t.T[i * mk + j] = p * (dp - t.r[i]) * scaling;
            });
            team.team_barrier();
            acc_ab(team, mq, D, mk, t.T, mk, t.K, ld, t.acc, ld);
            team.team_barrier();
          }
          rope_backward_store(team, mq, D, t.acc, ld, cos + q0 * D, sin + q0 * D, dqkv + q0 * C3 + h * D, C3);
        });
      });
}

// Scratch of a key-block team: its k' and v rows and dK', dV accumulators, then per streamed query
// tile the q' and dO rows, the P and dS tiles and the rows' m, l, r.
struct KeyTiles {
  float *K, *V, *dK, *dV, *Q, *dO, *P, *dS, *m, *l, *r;
  KOKKOS_INLINE_FUNCTION KeyTiles(Carve& c, int bk, int bq, int ld)
      : K(c.take(bk * ld)), V(c.take(bk * ld)), dK(c.take(bk * ld)), dV(c.take(bk * ld)), Q(c.take(bq * ld)),
        dO(c.take(bq * ld)), P(c.take(bq * bk)), dS(c.take(bq * bk)), m(c.take(bq)), l(c.take(bq)),
        r(c.take(bq)) {}
};

// Per (key block, head): dV = Pᵀ·dO and dK' = dSᵀ·q' over the query tiles of the sequence, P from
// the statistics of query_blocks; dK' RoPE-backward and dV into dQKV.
template <class ExecSpace>
void key_blocks(const ExecSpace& exec, const VisionVarlenShape& s, const VisionVarlenArgs& a, const float* qkv,
                const float* dAO, Stats st, float* dqkv) {
  const int D = static_cast<int>(s.head_dim), ld = padded(D);
  const std::int64_t S = s.total_seq_len, C = s.hidden_size, C3 = s.qkv_out_size(), H = s.num_heads;
  const std::int64_t n = s.num_sequences;
  const TilePlan plan = plan_tiles<ExecSpace>([&](int bk, int bq) { return floats_of<KeyTiles>(bk, bq, ld); });
  const std::int64_t blocks = (S + plan.block - 1) / plan.block;
  const std::int32_t* cu = a.cu_seqlens.data;
  const float *cos = a.cos.data, *sin = a.sin.data;
  const float scaling = static_cast<float>(a.scaling);
  Kokkos::parallel_for(
      "attnbwd::vision_varlen::key_blocks", team_policy(exec, blocks * H, plan),
      KOKKOS_LAMBDA(const Member<ExecSpace>& team) {
        const std::int64_t h = team.league_rank() % H;
        const std::int64_t t0 = (team.league_rank() / H) * plan.block;
        const std::int64_t t1 = t0 + plan.block < S ? t0 + plan.block : S;
        Carve carve{team_floats<ExecSpace>(team, plan)};
        const KeyTiles t(carve, plan.block, plan.tile, ld);
        for_each_segment(cu, n, t0, t1, [&](std::int64_t k0, int mk, std::int64_t q_begin, std::int64_t L) {
          team.team_barrier();  // a previous segment may still be reading the tiles
          load_rows(team, mk, D, qkv + k0 * C3 + C + h * D, C3, t.K, ld);
          load_rows(team, mk, D, qkv + k0 * C3 + 2 * C + h * D, C3, t.V, ld);
          fill(team, plan.block * ld, t.dK, 0.0f);
          fill(team, plan.block * ld, t.dV, 0.0f);
          for (std::int64_t i0 = q_begin; i0 < q_begin + L; i0 += plan.tile) {
            const int mq = static_cast<int>(q_begin + L - i0 < plan.tile ? q_begin + L - i0 : plan.tile);
            team.team_barrier();  // the previous tile's products are done with Q, dO, P, dS
            load_rows(team, mq, D, qkv + i0 * C3 + h * D, C3, t.Q, ld);
            load_rows(team, mq, D, dAO + i0 * C + h * D, C, t.dO, ld);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq), [&](const int i) {
              t.m[i] = st.m[h * S + i0 + i];
              t.l[i] = st.l[h * S + i0 + i];
              t.r[i] = st.r[h * S + i0 + i];
            });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, mq * mk), [&](const int idx) {
              const int i = idx / mk, j = idx % mk;
              const float p = exp_f(dot(t.Q + i * ld, t.K + j * ld, D) * scaling - t.m[i]) / t.l[i];
              const float dp = dot(t.dO + i * ld, t.V + j * ld, D);
              t.P[i * mk + j] = p;
              t.dS[i * mk + j] = p * (dp - t.r[i]) * scaling;
            });
            team.team_barrier();
            acc_atb(team, mk, D, mq, t.P, mk, t.dO, ld, t.dV, ld);
            acc_atb(team, mk, D, mq, t.dS, mk, t.Q, ld, t.dK, ld);
          }
          team.team_barrier();
          float* row = dqkv + k0 * C3 + h * D;
          rope_backward_store(team, mk, D, t.dK, ld, cos + k0 * D, sin + k0 * D, row + C, C3);
          store_rows(team, mk, D, t.dV, ld, row + 2 * C, C3);
        });
      });
}

}  // namespace vision_varlen_detail

template <class ExecSpace>
void vision_varlen_rope_backward(const ExecSpace& exec, const VisionVarlenShape& s, const VisionVarlenArgs& a,
                                 const Options&) {
  using namespace vision_varlen_detail;
  const std::int64_t S = s.total_seq_len, C = s.hidden_size, C3 = s.qkv_out_size(), H = s.num_heads;
  auto qkv = workspace<float>(exec, "attnbwd::vision_varlen::qkv", S * C3);
  auto dAO = workspace<float>(exec, "attnbwd::vision_varlen::dAO", S * C);
  auto AO = workspace<float>(exec, "attnbwd::vision_varlen::AO", S * C);
  auto dqkv = workspace<float>(exec, "attnbwd::vision_varlen::dQKV", S * C3);
  auto stats = workspace<float>(exec, "attnbwd::vision_varlen::softmax_stats", 3 * H * S);
  auto partial = workspace<float>(exec, "attnbwd::vision_varlen::column_sums", column_sum_workspace(S, C3));
  const Stats st{stats.data(), stats.data() + H * S, stats.data() + 2 * H * S};
  const float *X = a.hidden_states.data, *dY = a.grad_output.data;

  // Forward recompute: QKV = X·Wqkvᵀ + b, RoPE on q and k.
  gemm(exec, false, true, S, C3, C, 1.0f, X, a.qkv_weight.data, 0.0f, qkv.data());
  bias_rope(exec, s, a, qkv.data());

  // Output projection backward and attention (forward and backward per sequence and head).
  gemm(exec, false, false, S, C, C, 1.0f, dY, a.proj_weight.data, 0.0f, dAO.data());
  query_blocks(exec, s, a, qkv.data(), dAO.data(), AO.data(), st, dqkv.data());
  key_blocks(exec, s, a, qkv.data(), dAO.data(), st, dqkv.data());
  gemm(exec, true, false, C, C, S, 1.0f, dY, AO.data(), 0.0f, a.grad_proj_weight.data);
  column_sums(exec, S, C, Elements{dY, C}, a.grad_proj_bias.data, partial.data());

  // QKV projection backward.
  gemm(exec, false, false, S, C, C3, 1.0f, dqkv.data(), a.qkv_weight.data, 0.0f, a.grad_hidden_states.data);
  gemm(exec, true, false, C3, C, S, 1.0f, dqkv.data(), X, 0.0f, a.grad_qkv_weight.data);
  column_sums(exec, S, C3, Elements{dqkv.data(), C3}, a.grad_qkv_bias.data, partial.data());

  // The workspace is freed on return; the kernels using it must be done by then.
  exec.fence();
}

ATTNBWD_PORTABLE_INSTANTIATE(vision_varlen_rope_backward, VisionVarlenShape, VisionVarlenArgs)

}  // namespace attnbwd::portable
