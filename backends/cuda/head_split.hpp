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

}  // namespace attnbwd::cuda
