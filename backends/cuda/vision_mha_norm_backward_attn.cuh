// vision_mha_norm_backward (spec §4): the attention-backward kernels of the CUDA fast path's Default
// mode for head_dim 64 — dV, dP, the softmax row term, dS, dQ and dK per (batch, head) from the given P,
// with fp16 tensor-core products (mma.sync m16n8k16, fp32 accumulation), P read exactly once by each of
// two kernels and never written back. Internal to backends/cuda; plain CUDA C++.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnbwd::cuda::mha {

constexpr int kAttnHeadDim = 64;  // the head_dim the kernels are written for
constexpr int kAttnBlock = 64;    // queries or keys per CTA and per streamed block
// P⊙dP and dS are rounded to fp16 ×this (a power of 2, so the scaling is exact): V comes in fp16 as V·kAttnDsScale,
// which makes every dP product come out ×kAttnDsScale with no multiply in the element math (the same roundings as
// scaling afterwards, except V's fp16 subnormals, which the scaling keeps as normal numbers; |V| must stay below
// 65504/16 = 4094). δ is kept ×kAttnDsScale as well.
constexpr float kAttnDsScale = 16.0f;

// Blocks of kAttnBlock along the sequence (the kernels' grid x, and the partial-sum rows per batch).
__host__ __device__ inline std::int64_t attn_blocks(std::int64_t S) { return (S + kAttnBlock - 1) / kAttnBlock; }
// CTAs per (batch, head) of each warp-specialised kernel: two blocks of kAttnBlock rows each.
__host__ __device__ inline std::int64_t ws_ctas_per_head(std::int64_t S) {
  return (S + 2 * kAttnBlock - 1) / (2 * kAttnBlock);
}

struct AttnParams {
  std::int64_t B = 0, S = 0;
  int H = 0;              // heads; E = H·64
  float scale = 0.0f;     // softmax scale (dQ = (dS·K)·scale, dK = dSᵀ·(Q·scale))
  const float* P = nullptr;       // [B,H,S,S] the given probabilities, any 4-byte alignment
  const __half* dO = nullptr;     // [B·S, E] dA = dY·Wo in fp16 (head h at columns h·64..), 16-byte aligned rows
  const __half* q = nullptr;      // [B,H,S,64] fp16 copies of q, k and V·kAttnDsScale
  const __half* k = nullptr;
  const __half* v = nullptr;
  float* delta = nullptr;         // [B,H,S] scratch: kAttnDsScale·Σ_j P·dP per query row (written by the dQ kernel)
  std::int64_t delta_ld = 0;      // the warp-specialised kernels' δ row stride ([B·H][delta_ld], a multiple of 64
                                  // ≥ S; rows past S written as 0); the other kernels use S
  __half* dqkv = nullptr;         // [B·S, 3E] dQ | dK | dV (col = part·E + h·64 + d), fp16: the GEMM operand
  float* partial = nullptr;       // [B·attn_blocks(S), 3E]: per-CTA column sums of the fp32 dQ, dK, dV
  // Split blocks (attention_backward_sm90 with split = 2): two CTAs per block, each streaming half of the
  // other sequence's blocks; the second to finish adds the first's partial sums and writes the block.
  float* split_ws = nullptr;      // [B·H·attn_blocks(S)][kSplitBlockFloats] fp32
  unsigned* split_count = nullptr;  // [2 · B·H·attn_blocks(S)] zeros (left zero again)
  // The fused launch (attention_backward_sm90_ws with fused): [1 + 2·B·H] zeros (left zero again), and the heads
  // between a head's dQ work and its dK/dV work in the launch order.
  unsigned* order = nullptr;
  std::int64_t lag = 0;
  // The warp-specialised kernels' last block of the streamed sequence when at most 16 of its rows lie inside S
  // (S = 577: one): 1 = as a 16-wide block (dP on 16 columns, one k step of each accumulating product), 0 = as a
  // full 64-row block whose rows past S are zeros. The same bits (ATTNBWD_CUDA_MHA_TAIL).
  int narrow_tail = 0;
  // The warp-specialised kernels with P by TMA: P's boxes trimmed to what lies inside S — the dQ kernel's narrow last
  // key block 20 floats wide, its head's last ≤ 68 rows in boxes of 17 view rows (not 32), the dK/dV kernel's narrow
  // last query block in boxes of 4 view rows (not 16): fewer bytes asked of L2, the same bits (ATTNBWD_CUDA_MHA_PTRIM).
  // 1 = those trims; 2 = those and the dK/dV kernel's boxes 72 floats wide (not 136) in CTAs whose keys inside S fit
  // them (PTRIM=cols); 0 = whole boxes.
  int trim_p = 0;
  // The warp-specialised dK/dV kernel's δ per stage: 1 = by a TMA tensor copy through a [B·H][delta_ld] map (the op's
  // default), 0 = by a plain bulk copy (cp.async.bulk). The same bytes, bits and barrier (ATTNBWD_CUDA_MHA_DELTA).
  int delta_tma = 0;
};
constexpr int kSplitFloats = 66;  // per thread and half: two 64-float accumulators and two row sums
constexpr int kSplitBlockFloats = 2 * kSplitFloats * 128;  // per block: two halves of 128 threads

// dQ (and delta), then dK and dV; every element of p.dqkv's rows and of p.partial is written.
void attention_backward(const AttnParams& p, cudaStream_t stream);
// The same with the sm_90a wgmma kernels (vision_mha_norm_backward_attn_sm90.cu), streaming blocks through
// `stages` (2 or 3) buffers; `copy` (3 stages only): bit 0 P tiles with a fixed row per 8 threads, bit 1
// the fp16 tiles with a fixed row and chunk per thread (0: the measured copies); `min_blocks` 3 (2 stages
// only): kernels capped at 168 registers and 75 KB of shared memory so 3 CTAs fit per SM (else 2). Call it
// for sm_90 devices only (elsewhere the kernels trap).
// `split` 2 (with stages 2 and min_blocks 3, or stages 3 and min_blocks 2, copy 0): each block's loop over
// the other sequence is cut in two halves run by two CTAs (for grids of few blocks: the per-CTA chain is
// the time); p.split_ws and p.split_count must be set. The two halves' sums are added as a + b, which is
// the same in either order: deterministic.
void attention_backward_sm90(const AttnParams& p, int stages, int min_blocks, int copy, int split,
                             cudaStream_t stream);
// The warp-specialised form of the sm_90a kernels (a producer warpgroup feeding two consumer warpgroups of 64 rows
// each through 4 buffers on mbarriers; the same products in the same order as attention_backward_sm90 unsplit: the
// same bits). Each kernel takes P's tiles by TMA through a view of P as rows of 4·S floats (tma_dq, tma_dkv) or by
// the producer's cp.async; built for TMA in both, cp.async in both, and TMA for dQ with cp.async for dK/dV (the
// measured fastest). p.delta has p.delta_ld floats per head. Why it cannot run on p (empty when it can): P 16-byte
// aligned with B·H·S % 4 == 0, the fp16 operands 16-byte aligned.
std::string attention_ws_unsupported(const AttnParams& p);
// wide_dq: the dQ kernel's view rows of P 72 floats wide instead of 68 (fewer bank conflicts; built with TMA for
// both kernels). pdl (built with wide_dq and TMA for both): the dK/dV kernel launched as a programmatic dependent of
// the dQ kernel, its CTAs loading their first stages' Q, dO and P while the dQ kernel still runs and waiting for it
// before δ. fused (built with wide_dq and TMA for both, without pdl): both kinds of work in one launch, each head's
// dK/dV CTAs taking tickets ~p.lag heads after its dQ CTAs and waiting on p.order's per-head counter for δ (one
// partial last wave instead of the two kernels' two); p.order must be set.
void attention_backward_sm90_ws(const AttnParams& p, bool tma_dq, bool tma_dkv, cudaStream_t stream,
                                bool wide_dq = false, bool pdl = false, bool fused = false);
// The part of it that depends on the caller's inputs alone: checked before anything is enqueued.
std::string attention_ws_unsupported_input(std::int64_t B, std::int64_t S, int H, const float* P);

}  // namespace attnbwd::cuda::mha
