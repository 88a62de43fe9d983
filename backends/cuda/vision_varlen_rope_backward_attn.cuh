// vision_varlen_rope_backward (spec §5): the varlen attention kernels of the CUDA fast path (forward
// recompute, dQ, dK/dV), their shared parameters, and the device-built block table. Internal to
// backends/cuda; plain CUDA C++.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnbwd::cuda::varlen {

constexpr int kHeadDim = 128;  // the head_dim the attention kernels are written for
constexpr int kBlock = 64;     // tokens per query or key block

// Upper bound of the number of 64-token blocks over all sequences: Σ ⌈Lᵢ/64⌉ ≤ ⌈S/64⌉ + n.
inline std::int64_t block_slots(std::int64_t S, std::int64_t n) { return (S + kBlock - 1) / kBlock + n; }

struct AttnParams {
  const std::int32_t* cu = nullptr;  // device cu_seqlens [n+1]
  const int2* table = nullptr;       // [slots]: (sequence, block within it), or (-1, -1) past the end
  std::int64_t slots = 0;
  std::int64_t S = 0;   // tokens
  int H = 0;            // heads
  std::int64_t C = 0;   // hidden = H·128
  float scaling = 0.0f;
  const float* qkv = nullptr;   // [S,3C]: q' | k' | v (bias added, q and k rotated)
  const float* dAO = nullptr;   // [S,C]  dO = dY·Wp
  const float* cos = nullptr;   // [S,128] (the caller's tensors: read with scalar loads)
  const float* sin = nullptr;
  float* AO = nullptr;     // [S,C]  attention output (forward)
  float* lse = nullptr;    // [S,H]  log Σ exp of the scaled scores (forward)
  float* delta = nullptr;  // [S,H]  Σ_d dO·O (forward)
  float* dqkv = nullptr;   // [S,3C] dq | dk (RoPE backward applied) | dV
  // Products::Fp16 reads fp16 copies instead of qkv and dAO, and writes AOh instead of AO (all 16-byte
  // aligned rows: C % 8 == 0).
  const __half* qkvh = nullptr;  // [S,3C]
  const __half* dAOh = nullptr;  // [S,C]
  __half* AOh = nullptr;         // [S,C]
  // Products::Fp16 with dqkvh set (ATTNBWD_CUDA_VARLEN_DQKV=fp16): the dQ and dK/dV kernels write dq | dk | dv
  // in fp16 into dqkvh (the projection GEMMs' operand) instead of fp32 into dqkv, and each CTA the column
  // sums of the fp32 values of its rows into row `slot` of part [slots, 3C] (zeros for an unused slot),
  // which add up to grad_qkv_bias.
  __half* dqkvh = nullptr;  // [S,3C]
  float* part = nullptr;    // [slots,3C]
};

// Builds p.table from the device cu_seqlens (one CTA, no host copy). Memory-safe for any cu_seqlens:
// sequence ranges are clamped to [0, S] and the table never overflows `slots`.
void build_block_table(const std::int32_t* cu, std::int64_t n, std::int64_t S, int2* table, std::int64_t slots,
                       cudaStream_t stream);

// How the tensor-core products are formed: TF32, 3xTF32 (fp32-accurate; Strict) or fp16 operands
// (fp32 accumulation; Default). Fp16Smem32: the same fp16 products (same bits) from the older kernels
// that keep fp32 tiles in shared memory, kept for A/B timing (ATTNBWD_CUDA_VARLEN_ATTN=fp16-v1).
enum class Products { Tf32, Tf32x3, Fp16, Fp16Smem32 };

// Forward recompute: AO (AOh with Products::Fp16), lse, delta. sm90 (Products::Fp16 only; sm_90 devices only, the
// caller checks): the sm_90a wgmma kernel (attention_forward_sm90) instead of the mma.sync one.
void attention_forward(const AttnParams& p, Products products, cudaStream_t stream, bool sm90 = false);
void attention_forward_sm90(const AttnParams& p, cudaStream_t stream);
// Backward: dqkv (dq and dk through the RoPE backward, dV).
// one_launch (Products::Fp16 only; ignored otherwise): the dQ and dK/dV CTAs in one launch (grid z = 2), the same bits.
// sm90 (Products::Fp16 only; sm_90 devices only, the caller checks): kSm90Dq, kSm90Dkv: that kernel on sm_90a wgmma
// (attention_backward_dq_sm90, attention_backward_dkv_sm90) instead of mma.sync; with both bits and one_launch, the
// two wgmma kernels in one launch (attention_backward_one_sm90), else each in its own launch.
constexpr int kSm90Dq = 1, kSm90Dkv = 2, kSm90Fwd = 4;  // kSm90Fwd: attention_forward's sm90
void attention_backward(const AttnParams& p, Products products, cudaStream_t stream, bool one_launch = false,
                        int sm90 = 0);
// The sm_90a wgmma kernels alone (vision_varlen_rope_backward_attn_sm90.cu): dk, dv, or dq (fp16 with column sums
// where p.dqkvh is set, else fp32) from p.qkvh, p.dAOh, lse and delta. Products::Fp16's inputs; sm_90 only.
void attention_backward_dkv_sm90(const AttnParams& p, cudaStream_t stream);
void attention_backward_dq_sm90(const AttnParams& p, cudaStream_t stream);
void attention_backward_one_sm90(const AttnParams& p, cudaStream_t stream);  // both, grid z = 2, the same bits

}  // namespace attnbwd::cuda::varlen
