// gqa_rope_backward's key-major attention backward on sm_90a (gqa_rope_backward_attn_sm90.cu): each warpgroup
// owns 64 keys of one (b·Hq + h), streams the head's 64-query blocks and, per block, recomputes dPᵀ = V·dOᵀ with
// wgmma, forms dSᵀ = bf16(bf16(Pᵀ⊙(dPᵀ − r))·scaling) in registers, writes it once (transposed, for the dQ
// GEMM) and accumulates dV₃₂ += Pᵀ·dO and dK₃₂ += dSᵀ·Q in fp32 (one rounding at the end). P is read once
// and dP is never written. r (the softmax-backward row term, one per query) comes from the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnbwd::cuda {

struct GqaKvAttn {
  const __nv_bfloat16* dO = nullptr;  // dO(bh, q, :) = dO + bh·do_head + q·do_ld
  std::int64_t do_ld = 0, do_head = 0;
  const __nv_bfloat16* Q = nullptr;  // [BH, S, 128]
  const __nv_bfloat16* V = nullptr;  // [BH, S, 128]
  const __nv_bfloat16* P = nullptr;  // [BH, S, S]
  const float* r = nullptr;          // [BH, S]
  __nv_bfloat16* dS_t = nullptr;     // [BH, S (keys), S (queries)]: dSᵀ
  __nv_bfloat16* dK = nullptr;       // [BH, S, 128]: dK₃₂ per query head
  __nv_bfloat16* dV = nullptr;       // [BH, S, 128]: dV₃₂ per query head
  std::int64_t BH = 0, S = 0, D = 0;
  float scaling = 0.0f;
};

// Why the kernel cannot take the call ("" when it can): head_dim 128, S a multiple of 64, 16-byte aligned
// tensors and rows, an sm_90 device (cc 90).
std::string gqa_kv_attn_unsupported(const GqaKvAttn& p, int cc);
// Enqueues the kernel (the caller has checked gqa_kv_attn_unsupported).
void gqa_kv_attn_launch(const GqaKvAttn& p, cudaStream_t stream);
// The warp-specialised form (a TMA producer warp, two consumer warpgroups of 64 keys each): S % 128 == 0 and dO
// head-split or a view of dA as well.
std::string gqa_kv_attn_ws_unsupported(const GqaKvAttn& p, int cc);
void gqa_kv_attn_ws_launch(const GqaKvAttn& p, cudaStream_t stream);

// The GEMM attention path's steps 3-4 as one query-major sm_90a kernel (ATTNBWD_CUDA_GQA_DPSM;
// gqa_rope_backward_attn_sm90.cu): per (b·h, 64 queries), two passes over the key tiles with dP = bf16(dO·Vᵀ) by wgmma
// in registers (recomputed in the second, never in global memory) and P's tiles at any alignment: r = Σ P·dP, then
// dS = bf16(bf16(P⊙(dP − r))·scaling) into dS [BH, Sp, Sp] and, with Pp, P's padded copy [BH, Sp, Sp]; pad rows and
// columns zero. Replaces the dP GEMM (which writes dP) and the softmax row kernel (which reads it back with P).
struct GqaDpSoftmax {
  const __nv_bfloat16* dO = nullptr;  // dO(bh, q, :) = dO + bh·do_head + q·do_ld, Sp rows (zero pad rows)
  std::int64_t do_ld = 0, do_head = 0;
  const __nv_bfloat16* V = nullptr;  // [BH, Sp, 128] (zero pad rows)
  const __nv_bfloat16* P = nullptr;  // [BH, S, S]
  __nv_bfloat16* dS = nullptr;       // [BH, Sp, ld_ds]
  std::int64_t ld_ds = 0;
  __nv_bfloat16* Pp = nullptr;  // [BH, Sp, Sp] or null (no copy)
  std::int64_t BH = 0, S = 0, Sp = 0, D = 0;
  float scaling = 0.0f;
  bool wide = false;  // 128 query rows per CTA (two warpgroups sharing the V tiles) instead of 64
  // (narrow form) three CTAs per SM instead of two: two stages instead of three, 75 KB of shared memory, at most 168
  // registers (ATTNBWD_CUDA_GQA_DPSM=on3)
  bool three_ctas = false;
  // With O = bf16(P·V) [BH, S, 128] given (ATTNBWD_CUDA_GQA_PV=side: the op computes it beside its dA GEMM), r = Σ_d dO·O
  // (Σ_k P·dP reassociated, as the key-major path's) instead of pass 1: the kernel runs pass 2 alone.
  const __nv_bfloat16* O = nullptr;
  // With dQ given, the launch is the dQ pass instead (ATTNBWD_CUDA_GQA_KVDQ: the key-major path's r and dQ; its own
  // warp-specialised kernel; S % 128 == 0, no padding, dO head-split or a view of dA; dS, Pp, O and the forms above
  // unused): one pass over P accumulating (P⊙dP)·K and P·K beside r = Σ P·bf16(dP); writes r [BH, S] into r_out and
  // dQ = bf16(scaling·((P⊙dP)·K − r·P·K)) [BH, S, 128] into dQ (one rounding). K [BH, S, 128].
  const __nv_bfloat16* K = nullptr;
  __nv_bfloat16* dQ = nullptr;
  float* r_out = nullptr;
};
// Why the kernel cannot take the call ("" when it can): an sm_90 device, head_dim 128, Sp = S rounded up to 8 and
// ld_ds = Sp, at most 65535 (batch, head) pairs, 16-byte aligned tensors and dO rows (and O, where given).
std::string gqa_dp_softmax_unsupported(const GqaDpSoftmax& p, int cc);
// Whether the kernel's grid for `p` (its form by p.wide and p.three_ctas) is at most one wave on a device of `sms` SMs.
bool gqa_dp_softmax_one_wave(const GqaDpSoftmax& p, int sms);
void gqa_dp_softmax_launch(const GqaDpSoftmax& p, cudaStream_t stream);

// The small-S path (gqa_rope_backward_attn.cu, mma.sync; the second launch's griddepcontrol.wait needs sm_90 or
// later, which every target of the build is: sm_90a, sm_100a): steps 3-5 as two launches, query-major dS and dQ,
// then key-major dK₃₂ and dV₃₂ (a programmatic dependent of the first), any S, no padding copies.
struct GqaSmallAttn {
  const __nv_bfloat16* dO = nullptr;  // dO(bh, q, :) = dO + bh·do_head + q·do_ld
  std::int64_t do_ld = 0, do_head = 0;
  const __nv_bfloat16* Q = nullptr;  // [BH, S, 128]
  const __nv_bfloat16* K = nullptr;  // [BH, S, 128]
  const __nv_bfloat16* V = nullptr;  // [BH, S, 128]
  const __nv_bfloat16* P = nullptr;  // [BH, S, S]
  __nv_bfloat16* dS = nullptr;       // [BH, S, ld]: scratch written by the first launch, read by the second
  std::int64_t ld = 0;
  __nv_bfloat16* dQ = nullptr;  // [BH, S, 128]
  __nv_bfloat16* dK = nullptr;  // [BH, S, 128]: dK₃₂ per query head
  __nv_bfloat16* dV = nullptr;  // [BH, S, 128]: dV₃₂ per query head
  std::int64_t BH = 0, S = 0, D = 0;
  float scaling = 0.0f;
  // With `merged` set, steps 6-8 (GQA sums, RoPE backward, head merge) run in the kernels' epilogues instead of the
  // merge pass, with the same math in the same order (the same bits): the first launch writes dQ's RoPE backward
  // into merged[t, h·128 + d], the second, in clusters of the G = Hq / Hkv query heads of a KV head, sums the group's
  // bf16 dK₃₂ and dV₃₂ through distributed shared memory (fp32, head order, one rounding) and writes dK's RoPE backward
  // and dV into merged's k and v columns; dQ, dK and dV are then not written (gqa_small_attn_merge_unsupported).
  __nv_bfloat16* merged = nullptr;  // [B·S, ldm]: columns [0, Hq·128) q, [Hq·128, +Hkv·128) k, then Hkv·128 v
  std::int64_t ldm = 0;
  const __nv_bfloat16* cos = nullptr;  // [B·S, 128]
  const __nv_bfloat16* sin = nullptr;  // [B·S, 128]
  std::int64_t Hq = 0, Hkv = 0;
  // The first kernel's form: 2 (8 warps, each row group's keys split in two halves) or 1 (4 warps, all keys per warp).
  int split = 2;
  // With O = bf16(P·V) [BH, S, 128] given (ATTNBWD_CUDA_GQA_PV=side: the op computes it beside its dA GEMM), the first
  // kernel takes the softmax row term as r = Σ_d dO·O (Σ_k P·dP reassociated, as the key-major path's) instead of
  // its first sweep over the keys (r = Σ_k P·bf16(dP), the reference's order); O must stay unwritten until that kernel
  // ends (the second kernel writes dK only after its griddepcontrol.wait).
  const __nv_bfloat16* O = nullptr;
  // The second launch as a programmatic dependent of the first, which lets it queue at its start (1: its dV part runs
  // under the first kernel) or after its first sweep (2: ATTNBWD_CUDA_GQA_SMALL_PDL=late), or a plain launch after the
  // first ends (0: off). The same bits in every form.
  int pdl = 1;
};
// Why the kernels cannot take the op's own inputs ("" when they can): head_dim 128, at most 65535 (batch, head) pairs,
// Q, K, V 16-byte aligned. Known before the op carves its scratch (gqa's auto path choice asks it first).
std::string gqa_small_attn_inputs_unsupported(std::int64_t D, std::int64_t BH, const void* Q, const void* K,
                                              const void* V);
// Why the kernels cannot take the call ("" when they can): the inputs' conditions above, ld % 8 == 0 and ld ≥ S, dO
// strides multiples of 8, the other tensors 16-byte aligned.
std::string gqa_small_attn_unsupported(const GqaSmallAttn& a);
// Why the kernels cannot write the merged form (a.merged, ldm, cos, sin, Hq, Hkv; "" when they can): G = Hq / Hkv
// of 1, 2, 4 or 8 (a cluster per KV head), BH a multiple of Hq, ldm a multiple of 8 holding Hq + 2·Hkv heads, merged,
// cos and sin 16-byte aligned.
std::string gqa_small_attn_merge_unsupported(const GqaSmallAttn& a);
// Enqueues both launches (an Error where gqa_small_attn_unsupported, or with a.merged set
// gqa_small_attn_merge_unsupported, says why not).
void gqa_small_attn_launch(const GqaSmallAttn& a, cudaStream_t stream);

// O = bf16(P·V) [BH, S, 128] (one rounding of an fp32 sum) for the r of the small path's first kernel and of the dP +
// softmax kernel (GqaSmallAttn::O, GqaDpSoftmax::O), by an mma.sync kernel (gqa_rope_backward_pv.cu; any S and
// alignment of P: cuBLASLt has only slow kernels for odd S) as a persistent grid of at most `ctas` CTAs, one per SM, so
// that it takes `ctas` SMs beside a GEMM sized for the others. P [BH, S, S], V [BH, S, 128].
// gqa_pv_unsupported: why it cannot ("" when it can): head_dim 128, V 16-byte, O 4-byte aligned.
std::string gqa_pv_unsupported(const __nv_bfloat16* P, const __nv_bfloat16* V, const __nv_bfloat16* O, std::int64_t S,
                               std::int64_t BH, std::int64_t D);
void gqa_pv_launch(const __nv_bfloat16* P, const __nv_bfloat16* V, __nv_bfloat16* O, std::int64_t S, std::int64_t BH,
                   std::int64_t D, int ctas, cudaStream_t stream);

}  // namespace attnbwd::cuda
