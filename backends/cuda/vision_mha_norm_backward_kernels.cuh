// The element-wise and reduction kernels of vision_mha_norm_backward's CUDA fast path (spec §4), as
// launchers on a stream. Every reduction runs in a fixed order (no atomics): per-block partial sums
// into a [chunks, width] buffer, then sum_partials adds the chunks in index order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnbwd::cuda::mha {

// dA [B·S, H·D] -> dO [B, H, S, D]. Both 16-byte aligned, D % 4 == 0.
void head_split(const float* dA, float* dO, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D,
                cudaStream_t stream);

// Softmax backward per row of every (b, h): ds holds dP on entry (rows of `ld`), dS = P⊙(dP − r) on
// exit, r = Σ_j P·dP. P rows are dense (stride S), any alignment.
void softmax_backward(const float* P, float* ds, std::int64_t rows, std::int64_t S, std::int64_t ld,
                      cudaStream_t stream);

// Tokens per block of the token-chunked kernels below (and so their number of partial rows).
std::int64_t tokens_per_block(std::int64_t tokens, int sm_count);

// dQ, dK, dV [B, H, S, D] -> dQKV [B·S, 3·H·D] (col = part·E + h·D + d), plus the column sums of each
// block's tokens into partial [blocks, 3E]. All buffers 16-byte aligned, D % 4 == 0.
void merge_heads(const float* dq, const float* dk, const float* dv, float* dqkv, float* partial, std::int64_t B,
                 std::int64_t S, std::int64_t H, std::int64_t D, std::int64_t tpb, cudaStream_t stream);

// LayerNorm backward with the σ² quirk fused with the residual, one token at a time:
//   σ = √(var + eps), xc = x − mean, g = dXn⊙γ,
//   grad_x = dY + (g/σ − mean(g/σ) − xc·mean(g⊙xc)/σ²),
// plus each block's column sums of dXn⊙(xc/σ), dXn and dY into partial [blocks, 3E] (in that order);
// returns the number of blocks (partial rows), at most layer_norm_max_blocks(N, sm_count).
// E ≤ 4096; the float4 paths are taken when every row pointer allows it: one warp per token when
// E = 128·V4 with V4 ≤ 8 (at most one block per SM, tokens in multiples of 8 per block, one reciprocal of σ
// per token; ATTNBWD_CUDA_MHA_LN=block: one block per token, =div: two divisions per element, for A/B), else
// one block per token.
std::int64_t layer_norm_backward(const float* dxn, const float* x, const float* mean, const float* var,
                                 const float* gamma, const float* dy, float* grad_x, float* partial, std::int64_t N,
                                 std::int64_t E, float eps, int sm_count, cudaStream_t stream);
std::int64_t layer_norm_max_blocks(std::int64_t N, int sm_count);

// out_s[c] = Σ_{j < chunks} partial[j·width + col] (col = s·seg + c, s < width/seg ≤ 3), summed in
// double in a fixed order (8 interleaved row groups, then the groups in order), rounded to float once.
void sum_partials(const float* partial, std::int64_t chunks, std::int64_t width, std::int64_t seg, float* out0,
                  float* out1, float* out2, cudaStream_t stream);

}  // namespace attnbwd::cuda::mha
