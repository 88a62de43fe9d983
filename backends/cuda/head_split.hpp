// G [T, H·D] row-major (T = B·S tokens) -> out [B, H, S, D]: the head split of a merged projection
// gradient (out_proj's dX on the cuBLASLt path, gqa_rope's dA).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnbwd::cuda {

// Enqueues the copy on `stream`; 16 bytes per thread when D % 8 == 0 and both pointers are 16-byte
// aligned, else one element per thread.
void head_split(const __nv_bfloat16* g, __nv_bfloat16* out, std::int64_t T, std::int64_t S, std::int64_t H,
                std::int64_t D, cudaStream_t stream);

// One tensor of pad_heads: element (b, h, s, d) of the source is src[b·sb + s·ss + h·sh + d]
// (strides in elements), the destination dst is [B, H, S8, D].
struct PadHeads {
  const __nv_bfloat16* src;
  __nv_bfloat16* dst;
  std::int64_t H, sb, ss, sh;
};
constexpr int kMaxPadHeads = 4;

// Copies up to kMaxPadHeads tensors in one launch into a head layout [B, H, S8, D] whose rows
// S ≤ s < S8 of every head are zero (the operands of attention GEMMs padded to S8 rows, where cuBLASLt
// has fast kernels only for sizes that are multiples of 8). 16 bytes per thread: D % 8 == 0, the
// pointers 16-byte aligned and the strides multiples of 8 (the caller's checks).
void pad_heads(const PadHeads* copies, int n, std::int64_t B, std::int64_t S, std::int64_t S8, std::int64_t D,
               cudaStream_t stream);

// One operand of a per-head GEMM batch (head_pointers): matrix (b, h) starts at base + b·sb + h·sh elements of bf16.
struct HeadOperand {
  const __nv_bfloat16* base;
  std::int64_t sb, sh;
};

// Writes the matrix addresses of a batch of B·H GEMMs, one per (batch element, head), for cuBLASLt's pointer-array
// batch (lt_gemm.hpp, Gemm::pointer_array): out[k·B·H + b·H + h] = ops[k].base + b·ops[k].sb + h·ops[k].sh for the
// three operands k = 0, 1, 2 (A, B, C). out: 3·B·H pointers of device memory, 8-byte aligned. On `stream`, so that a
// captured graph rewrites them at every replay (the scratch they live in is shared with other work).
void head_pointers(const HeadOperand (&ops)[3], std::int64_t B, std::int64_t H, void** out, cudaStream_t stream);

}  // namespace attnbwd::cuda
