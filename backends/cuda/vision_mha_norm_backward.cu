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
// Precision: Default runs the four projection GEMMs with fp16 operands (dY, attn_output, x_norm, the
// two weights and dQKV converted to fp16 copies; fp32 accumulation and results; spec §4 measured
// all-GEMMs-fp16 to pass) and the attention GEMMs on the fp32 tensors with TF32 tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32; P is read as it is, a conversion pass would cost more than it
// saves); ATTNBWD_CUDA_FP32_GEMM=tf32 runs the projections in TF32 too (A/B). Strict runs every GEMM
// in full fp32 (CUBLAS_COMPUTE_32F). Element-wise math is fp32 in both; cross-block sums are added
// in double. Deterministic in both modes: no atomics, every reduction in a fixed order, one cuBLASLt
// algorithm per GEMM shape.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "check.hpp"
#include "context.hpp"
#include "convert.hpp"
#include "graph_key.hpp"
#include "cuda_backend.hpp"
#include "lt_gemm.hpp"
#include "stages.hpp"
#include "vision_mha_norm_backward_kernels.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// fp32 GEMMs (strided batches too) through lt_gemm with the mode's compute type; lt_gemm falls back
// from TF32 to full fp32 where cuBLASLt has no TF32 algorithm for an alignment (P's odd rows).
void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t compute, Gemm g, const float* A,
          const float* B, float* C, float alpha = 1.0f) {
  g.a_type = g.b_type = g.c_type = CUDA_R_32F;
  g.compute = compute;
  cuda::gemm(ctx, slot, stream, g, A, B, C, alpha);
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
  const bool use_fp16 = o.precision != Precision::Strict && fp16_gemms();

  // Scratch (slot 0), each piece a multiple of 64 floats: dA (later dXn) | dO | dQh | dKh | dVh |
  // dS (later dQKV) | partials of the qkv bias | partials of the LayerNorm sums.
  const int64_t n_tok = round_up(N * E, 64), n_ds = round_up(std::max(BH * S * ld, N * E3), 64),
                n_part = round_up(chunks * E3, 64);
  // fp16 copies (Default with fp16 projections), in floats of space: dY | A | x_norm | dQKV | Wo | Wqkv.
  const int64_t n_w = round_up(E * E, 128) / 2;
  const int64_t n_half = use_fp16 ? 3 * n_tok / 2 + round_up(N * E3, 128) / 2 + 4 * n_w : 0;
  float* base = static_cast<float*>(
      ctx.scratch(0, static_cast<std::size_t>(5 * n_tok + n_ds + 2 * n_part + n_half) * sizeof(float), stream));
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
  __half* dYh = reinterpret_cast<__half*>(part_ln + n_part);
  __half* Ah = dYh + n_tok;
  __half* Xnh = Ah + n_tok;
  __half* dQKVh = Xnh + n_tok;
  __half* Woh = dQKVh + round_up(N * E3, 128);
  __half* Wqkvh = Woh + 2 * n_w;

  const float* dY = a.grad_output.data;
  const float* P = a.attn_weights.data;
  const float scale = static_cast<float>(a.scale);
  const int count = static_cast<int>(BH);

  StageTimer stages(stream);  // with it on, the side-stream work runs on `stream`
  const cudaStream_t side = stages.side_or_main(ctx.side_stream());
  const auto op = [&](const float* x, const __half* h) { return operand(use_fp16, x, h); };
  if (use_fp16) {  // before the fork: the side stream's first GEMM reads dY and A
    convert_to_half(dY, dYh, N * E, stream);
    convert_to_half(a.attn_output.data, Ah, N * E, stream);
    convert_to_half(a.out_weight.data, Woh, E * E, stream);
    stages.mark("to_half_dY_A_Wo");
  }
  // 1. grad_out_weight (side stream) and dA.
  stages.fork(ctx);
  {
    Gemm g;
    g.trans_a = true;
    g.M = E, g.N = E, g.K = N, g.lda = E, g.ldb = E, g.ldc = E;
    gemm(ctx, 1, side, compute, g, op(dY, dYh), op(a.attn_output.data, Ah), a.grad_out_weight.data);
    stages.mark("dW_out");
  }
  {
    Gemm g;
    g.M = N, g.N = E, g.K = E, g.lda = E, g.ldb = E, g.ldc = E;
    gemm(ctx, 0, stream, compute, g, op(dY, dYh), op(a.out_weight.data, Woh), dA);
    stages.mark("dA");
  }
  // 2. head split.
  mha::head_split(dA, dO, B, S, H, D, stream);
  stages.mark("head_split");
  // 3. dP = dO·Vᵀ, then dS in place.
  {
    Gemm g;
    g.trans_b = true;
    g.M = S, g.N = S, g.K = D, g.lda = D, g.ldb = D, g.ldc = ld, g.count = count, g.stride_a = S * D, g.stride_b = S * D,
    g.stride_c = S * ld;
    gemm(ctx, 0, stream, compute, g, dO, a.v.data, dS);
  }
  stages.mark("dP");
  mha::softmax_backward(P, dS, BH * S, S, ld, stream);
  stages.mark("dS");
  // 4. dV = Pᵀ·dO, dQ = (dS·K)·scale, dK = dSᵀ·Q·scale.
  {
    Gemm g;
    g.trans_a = true;
    g.M = S, g.N = D, g.K = S, g.lda = S, g.ldb = D, g.ldc = D, g.count = count, g.stride_a = S * S, g.stride_b = S * D,
    g.stride_c = S * D;
    gemm(ctx, 0, stream, compute, g, P, dO, dVh);
    stages.mark("dV");
  }
  {
    Gemm g;
    g.M = S, g.N = D, g.K = S, g.lda = ld, g.ldb = D, g.ldc = D, g.count = count, g.stride_a = S * ld, g.stride_b = S * D,
    g.stride_c = S * D;
    gemm(ctx, 0, stream, compute, g, dS, a.k.data, dQh, scale);
    g.trans_a = true;
    gemm(ctx, 0, stream, compute, g, dS, a.q.data, dKh, scale);
    stages.mark("dQ_dK");
  }
  // 5. merge + grad_qkv_bias.
  mha::merge_heads(dQh, dKh, dVh, dQKV, part_qkv, B, S, H, D, tpb, stream);
  mha::sum_partials(part_qkv, chunks, E3, E3, a.grad_qkv_bias.data, nullptr, nullptr, stream);
  stages.mark("merge_bias");
  if (use_fp16) {
    convert_to_half(dQKV, dQKVh, N * E3, stream);
    convert_to_half(a.x_norm.data, Xnh, N * E, stream);
    convert_to_half(a.qkv_weight.data, Wqkvh, E3 * E, stream);
    stages.mark("to_half_dQKV_Xn_Wqkv");
  }
  // 6. grad_qkv_weight (side stream, after dQKV exists) and dXn.
  stages.fork(ctx);
  {
    Gemm g;
    g.trans_a = true;
    g.M = E3, g.N = E, g.K = N, g.lda = E3, g.ldb = E, g.ldc = E;
    gemm(ctx, 1, side, compute, g, op(dQKV, dQKVh), op(a.x_norm.data, Xnh), a.grad_qkv_weight.data);
    stages.mark("dW_qkv");
  }
  {
    Gemm g;
    g.M = N, g.N = E, g.K = E3, g.lda = E3, g.ldb = E, g.ldc = E;
    gemm(ctx, 0, stream, compute, g, op(dQKV, dQKVh), op(a.qkv_weight.data, Wqkvh), dXn);
    stages.mark("dXn");
  }
  // 7. LayerNorm backward + residual, then the three token sums.
  mha::layer_norm_backward(dXn, a.x.data, a.x_mean.data, a.x_var.data, a.ln_weight.data, dY, a.grad_x.data, part_ln,
                           N, E, static_cast<float>(a.norm_eps), tpb, stream);
  mha::sum_partials(part_ln, chunks, E3, E, a.grad_ln_weight.data, a.grad_ln_bias.data, a.grad_out_bias.data,
                    stream);
  stages.mark("layer_norm_sums");
  stages.join(ctx);
  stages.report("vision_mha_norm_backward B=" + std::to_string(B) + " S=" + std::to_string(S) +
                (o.precision == Precision::Strict ? " strict" : " default"));
}

}  // namespace

void run(const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream);
  const auto key = [&] {
    return graph_key(3, a, {bits_of(a.scale), bits_of(a.norm_eps), static_cast<std::uint64_t>(o.precision),
                            env_word("ATTNBWD_CUDA_FP32_GEMM")});
  };
  ctx.enqueue(key, stream, [&](cudaStream_t st) { enqueue_op(ctx, s, a, o, st); });
  ctx.release(stream);
}

}  // namespace attnbwd::cuda
