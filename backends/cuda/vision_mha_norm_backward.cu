// vision_mha_norm_backward on the CUDA fast path (spec §4), v1: cuBLASLt GEMMs on the fp32 tensors
// directly (no conversion passes) plus own kernels for everything else.
//
// Stages, on the caller's stream unless noted (N = B·S tokens, E = H·D):
//  1. dA = dY·Wo; on the side stream, concurrently, grad_out_weight = dYᵀ·A.
//  2. head split dA [N, E] -> dO [B, H, S, D] (so every (b, h) matrix is one stride apart).
//  3. dP = dO·Vᵀ per (b, h) into the dS buffer (rows padded to a multiple of 4 floats), then the row
//     kernel: r = Σ P·dP, dS = P⊙(dP − r), in place.
//  4. dV = Pᵀ·dO, dQ = (dS·K)·scale, dK = dSᵀ·Q·scale (strided-batched, scale as the GEMM's alpha).
//  5. merge dQ|dK|dV into dQKV [N, 3E] with per-block column sums, reduced to grad_qkv_bias.
//  6. on the side stream grad_qkv_weight = dQKVᵀ·x_norm; here dXn = dQKV·Wqkv.
//  7. LayerNorm backward (σ² quirk) + residual -> grad_x, with per-block column sums of dXn⊙x̂, dXn
//     and dY reduced to grad_ln_weight, grad_ln_bias, grad_out_bias.
// P is read twice (row kernel, dV GEMM); dP/dS make four more P-sized passes. A fused attention
// kernel reading P once is the next step (perf notes).
//
// Precision: Default runs every GEMM with TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32; measured
// by the spec to pass every workload), Strict with full fp32 (CUBLAS_COMPUTE_32F). Element-wise math
// is fp32 in both; cross-block sums are added in double. Deterministic in both modes: no atomics, every
// reduction in a fixed order, one cuBLASLt algorithm per GEMM shape.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "check.hpp"
#include "context.hpp"
#include "graph_key.hpp"
#include "cuda_backend.hpp"
#include "vision_mha_norm_backward_kernels.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------------
// Row-major fp32 GEMM through cuBLASLt, strided-batched: C_i = alpha·op(A_i)·op(B_i), i < count,
// X_i = X + i·sx. A [M,K] (or [K,M] when trans_a), B [K,N] (or [N,K] when trans_b), C [M,N].
struct Batched {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  int count = 1;
  int64_t sa = 0, sb = 0, sc = 0;
};

// Largest power of two ≤ 16 dividing every byte offset a matrix of the batch starts at or steps by.
int alignment(const void* p, int64_t ld, int64_t stride) {
  const auto bytes = [](int64_t e) { return static_cast<std::uint64_t>(e) * 4u; };
  const std::uint64_t a = reinterpret_cast<std::uintptr_t>(p) | bytes(ld) | bytes(stride) | 16u;
  return static_cast<int>(a & (~a + 1));  // lowest set bit
}

struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(int64_t rows, int64_t cols, int64_t ld, int count, int64_t stride) {
    ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, CUDA_R_32F, static_cast<std::uint64_t>(rows),
                                                    static_cast<std::uint64_t>(cols), ld));
    if (count > 1) {
      ATTNBWD_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &stride, sizeof stride));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Desc {
  cublasLtMatmulDesc_t h = nullptr;
  Desc(cublasComputeType_t compute, const Batched& g) {
    // Column-major view: C_iᵀ[N,M] = op(B_i)ᵀ·op(A_i)ᵀ, so cuBLASLt's first operand is our B.
    const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&h, compute, CUDA_R_32F));
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  }
  ~Desc() { cublasLtMatmulDescDestroy(h); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};

struct Choice {
  cublasLtMatmulAlgo_t algo;
  cublasComputeType_t compute;  // the requested one, or full fp32 when cuBLASLt had nothing for it
};

void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t compute, const Batched& g, const float* A,
          const float* B, float* C, float alpha = 1.0f) {
  Layout first(g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.count, g.sb);
  Layout second(g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.count, g.sa);
  Layout out(g.N, g.M, g.ldc, g.count, g.sc);
  const int al_first = alignment(B, g.ldb, g.sb), al_second = alignment(A, g.lda, g.sa),
            al_c = alignment(C, g.ldc, g.sc);

  using Key = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int64_t,
                         int64_t, int64_t, int>;
  thread_local std::map<Key, Choice> cache;
  const Key key{ctx.device(), static_cast<int>(compute), g.trans_a, g.trans_b, g.M, g.N, g.K, g.lda, g.ldb, g.ldc,
                g.count, g.sa, g.sb, g.sc, al_first * 10000 + al_second * 100 + al_c};
  auto it = cache.find(key);
  if (it == cache.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } pref_guard{pref};
    const std::uint64_t ws = Context::kLtWorkspaceBytes;
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const std::uint32_t a1 = static_cast<std::uint32_t>(al_first), a2 = static_cast<std::uint32_t>(al_second),
                        a3 = static_cast<std::uint32_t>(al_c);
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a1, sizeof a1));
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a2, sizeof a2));
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a3, sizeof a3));
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a3, sizeof a3));
    // TF32 kernels may need more alignment than P's odd rows give: then full fp32 (more accurate).
    for (const cublasComputeType_t c : {compute, CUBLAS_COMPUTE_32F}) {
      Desc desc(c, g);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc.h, first.h, second.h, out.h, out.h,
                                                               pref, 1, &result, &found);
      if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        it = cache.emplace(key, Choice{result.algo, c}).first;
        break;
      }
    }
    if (it == cache.end())
      throw Error("cuda backend: cuBLASLt has no algorithm for an fp32 " + std::to_string(g.count) + "x" +
                  std::to_string(g.M) + "x" + std::to_string(g.N) + "x" + std::to_string(g.K) + " GEMM");
  }
  Desc desc(it->second.compute, g);
  const float beta = 0.0f;
  ATTNBWD_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), desc.h, &alpha, B, first.h, A, second.h, &beta, C, out.h, C, out.h,
                                      &it->second.algo, ctx.lt_workspace(slot), Context::kLtWorkspaceBytes, stream));
}

constexpr int64_t kMaxEmbed = 4096;  // the LayerNorm kernel keeps a token's row in registers

}  // namespace

Support supports(const VisionMhaShape& s, const Options&) {
  const Context& ctx = Context::current();
  if (!has_fatbin_code(ctx.cc()))
    return {"no sm_90a/sm_100a code for compute capability " + std::to_string(ctx.cc())};
  if (s.tokens() <= 0 || s.num_heads <= 0 || s.head_dim <= 0) return {"empty shape"};
  if (s.embed_dim != s.num_heads * s.head_dim) return {"embed_dim is not num_heads*head_dim"};
  if (s.head_dim % 4 != 0) return {"head_dim not a multiple of 4"};
  if (s.embed_dim > kMaxEmbed) return {"embed_dim above " + std::to_string(kMaxEmbed)};
  if (s.batch * s.num_heads > (int64_t{1} << 30)) return {"too many (batch, head) pairs"};
  if (s.tokens() >= (int64_t{1} << 31)) return {"too many tokens"};
  return {};
}

namespace {

// The whole op on `stream` (and the side stream, joined before returning).
void enqueue_op(Context& ctx, const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream) {
  const cublasComputeType_t compute =
      o.precision == Precision::Strict ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  const int64_t B = s.batch, S = s.seq_len, E = s.embed_dim, H = s.num_heads, D = s.head_dim, N = s.tokens();
  const int64_t E3 = 3 * E, BH = B * H, ld = round_up(S, 4);
  const int64_t tpb = mha::tokens_per_block(N, ctx.sm_count()), chunks = (N + tpb - 1) / tpb;

  // Scratch (slot 0), each piece a multiple of 64 floats: dA (later dXn) | dO | dQh | dKh | dVh |
  // dS (later dQKV) | partials of the qkv bias | partials of the LayerNorm sums.
  const int64_t n_tok = round_up(N * E, 64), n_ds = round_up(std::max(BH * S * ld, N * E3), 64),
                n_part = round_up(chunks * E3, 64);
  float* base = static_cast<float*>(
      ctx.scratch(0, static_cast<std::size_t>(5 * n_tok + n_ds + 2 * n_part) * sizeof(float), stream));
  float* dA = base;
  float* dO = dA + n_tok;
  float* dQh = dO + n_tok;
  float* dKh = dQh + n_tok;
  float* dVh = dKh + n_tok;
  float* dS = dVh + n_tok;
  float* part_qkv = dS + n_ds;
  float* part_ln = part_qkv + n_part;
  float* dXn = dA;     // dA is dead after the head split
  float* dQKV = dS;    // dS is dead after the dQ and dK GEMMs

  const float* dY = a.grad_output.data;
  const float* P = a.attn_weights.data;
  const float scale = static_cast<float>(a.scale);
  const int count = static_cast<int>(BH);

  // 1. grad_out_weight (side stream) and dA.
  ctx.fork(stream);
  {
    Batched g;
    g.trans_a = true;
    g.M = E, g.N = E, g.K = N, g.lda = E, g.ldb = E, g.ldc = E;
    gemm(ctx, 1, ctx.side_stream(), compute, g, dY, a.attn_output.data, a.grad_out_weight.data);
  }
  {
    Batched g;
    g.M = N, g.N = E, g.K = E, g.lda = E, g.ldb = E, g.ldc = E;
    gemm(ctx, 0, stream, compute, g, dY, a.out_weight.data, dA);
  }
  // 2. head split.
  mha::head_split(dA, dO, B, S, H, D, stream);
  // 3. dP = dO·Vᵀ, then dS in place.
  {
    Batched g;
    g.trans_b = true;
    g.M = S, g.N = S, g.K = D, g.lda = D, g.ldb = D, g.ldc = ld, g.count = count, g.sa = S * D, g.sb = S * D,
    g.sc = S * ld;
    gemm(ctx, 0, stream, compute, g, dO, a.v.data, dS);
  }
  mha::softmax_backward(P, dS, BH * S, S, ld, stream);
  // 4. dV = Pᵀ·dO, dQ = (dS·K)·scale, dK = dSᵀ·Q·scale.
  {
    Batched g;
    g.trans_a = true;
    g.M = S, g.N = D, g.K = S, g.lda = S, g.ldb = D, g.ldc = D, g.count = count, g.sa = S * S, g.sb = S * D,
    g.sc = S * D;
    gemm(ctx, 0, stream, compute, g, P, dO, dVh);
  }
  {
    Batched g;
    g.M = S, g.N = D, g.K = S, g.lda = ld, g.ldb = D, g.ldc = D, g.count = count, g.sa = S * ld, g.sb = S * D,
    g.sc = S * D;
    gemm(ctx, 0, stream, compute, g, dS, a.k.data, dQh, scale);
    g.trans_a = true;
    gemm(ctx, 0, stream, compute, g, dS, a.q.data, dKh, scale);
  }
  // 5. merge + grad_qkv_bias.
  mha::merge_heads(dQh, dKh, dVh, dQKV, part_qkv, B, S, H, D, tpb, stream);
  mha::sum_partials(part_qkv, chunks, E3, E3, a.grad_qkv_bias.data, nullptr, nullptr, stream);
  // 6. grad_qkv_weight (side stream, after dQKV exists) and dXn.
  ctx.fork(stream);
  {
    Batched g;
    g.trans_a = true;
    g.M = E3, g.N = E, g.K = N, g.lda = E3, g.ldb = E, g.ldc = E;
    gemm(ctx, 1, ctx.side_stream(), compute, g, dQKV, a.x_norm.data, a.grad_qkv_weight.data);
  }
  {
    Batched g;
    g.M = N, g.N = E, g.K = E3, g.lda = E3, g.ldb = E, g.ldc = E;
    gemm(ctx, 0, stream, compute, g, dQKV, a.qkv_weight.data, dXn);
  }
  // 7. LayerNorm backward + residual, then the three token sums.
  mha::layer_norm_backward(dXn, a.x.data, a.x_mean.data, a.x_var.data, a.ln_weight.data, dY, a.grad_x.data, part_ln,
                           N, E, static_cast<float>(a.norm_eps), tpb, stream);
  mha::sum_partials(part_ln, chunks, E3, E, a.grad_ln_weight.data, a.grad_ln_bias.data, a.grad_out_bias.data,
                    stream);
  ctx.join(stream);
}

}  // namespace

void run(const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream);
  const Context::GraphKey key =
      graph_key(3, a, {bits_of(a.scale), bits_of(a.norm_eps), static_cast<std::uint64_t>(o.precision)});
  ctx.enqueue(key, stream, [&](cudaStream_t st) { enqueue_op(ctx, s, a, o, st); });
  ctx.release(stream);
}

}  // namespace attnbwd::cuda
