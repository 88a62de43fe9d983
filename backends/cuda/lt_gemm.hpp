// Row-major GEMMs through cuBLASLt: C[M,N] = alpha·op(A)·op(B) + beta·C with A [M,K] (or [K,M] when
// trans_a) and B [K,N] (or [N,K] when trans_b), all row-major with explicit leading dimensions;
// optionally a strided batch (C_i = alpha·op(A_i)·op(B_i) + beta·C_i, X_i = X + i·stride_x elements) or a batch
// whose matrices are given by device arrays of pointers (Gemm::pointer_array).
// fp32 accumulation always; split-K partial sums are reduced in fp32 (the compute type), never in a
// 16-bit output type, so a bf16 result is one rounding of an fp32 sum, as the reference's fp32 GEMMs
// give.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "context.hpp"

namespace attnbwd::cuda {

struct Gemm {
  bool trans_a = false, trans_b = false;
  std::int64_t M = 0, N = 0, K = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF, c_type = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int count = 1;  // strided batch
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // > 0: CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, the SMs the algorithm is chosen and sized for (a GEMM that runs beside
  // another stream's kernels: cuBLASLt's persistent grids otherwise hold every SM until they end). 0: all of them.
  int sm_target = 0;
  // true: cuBLASLt's first heuristic answer even where the context times candidates (ATTNBWD_CUDA_LT_TUNE): for a GEMM
  // whose fastest candidate alone is not the fastest beside another stream's kernels.
  bool first_answer = false;
  // true: cuBLASLt's pointer-array batch (CUBLASLT_BATCH_MODE_POINTER_ARRAY): A, B and C given to gemm() are device arrays
  // of `count` pointers, X_i = X[i] (written before the GEMM runs, on its stream; the strides are unused), for batches
  // whose matrices are not one stride apart (gqa's dA straight into the head-split dO: b and h move the operands
  // independently). ptr_align: the caller's promise that every matrix start is a multiple of it (bytes; 2, 4, 8 or 16),
  // the alignment cuBLASLt's choice may rely on (with the leading dimensions).
  bool pointer_array = false;
  int ptr_align = 0;
};

// Enqueues the GEMM on `stream` using the workspace of `slot` (Context::fork/join for the side slot).
void gemm(Context& ctx, int slot, cudaStream_t stream, const Gemm& g, const void* A, const void* B, void* C,
          float alpha = 1.0f, float beta = 0.0f);

// out[b, h] = dY_b·W[:, h·D..(h+1)·D] for every batch element b < B and head h < H, written straight into the head-split
// layout out [B, H, S, D]: dY [B·S, K] and W [K, ldw] row-major, all bf16, fp32 accumulation, one rounding (the same dot
// products as dY·W followed by a head-split copy, without the copy). One cuBLASLt pointer-array batch (Gemm::
// pointer_array) per piece of at most `batches_per_piece` batch elements (0: all B at once); the 3·B·H matrix addresses
// go to `ptrs` (the caller's device memory, 8-byte aligned, untouched by other work until the GEMMs ran), written on
// `stream` first (head_pointers), so that a captured graph rewrites them at every replay. gqa's dA
// (ATTNBWD_CUDA_GQA_DA=heads; out_proj's dX measured slower in this form with D = 64, forty-fifth session).
struct HeadsGemm {
  const __nv_bfloat16* dy = nullptr;
  const __nv_bfloat16* w = nullptr;
  __nv_bfloat16* out = nullptr;
  std::int64_t B = 0, S = 0, H = 0, D = 0, K = 0, ldw = 0;
  std::int64_t batches_per_piece = 0;
  int sm_target = 0;  // Gemm::sm_target
};
void gemm_into_heads(Context& ctx, int slot, cudaStream_t stream, const HeadsGemm& h, void** ptrs);

// A pointer-array batch (Gemm::pointer_array) of g.count <= kMaxListed GEMMs of one shape whose matrices are listed
// here by address (not one stride apart, and not affine in a (b, h) grid as in gemm_into_heads): 3·count addresses go
// to `ptrs` (the caller's device memory, 8-byte aligned, untouched by other work until the GEMMs ran), written on
// `stream` first, so that a captured graph rewrites them at every replay; ptr_align from the listed addresses. gqa's
// q/k/v weight gradients as one launch (ATTNBWD_CUDA_GQA_DWQKV's batch, auto's where it fits).
constexpr int kMaxListed = 18;
struct ListedGemm {
  Gemm g;  // shape, leading dimensions, count; pointer_array and ptr_align are gemm_listed's
  const void* a[kMaxListed] = {};
  const void* b[kMaxListed] = {};
  void* c[kMaxListed] = {};
};
void gemm_listed(Context& ctx, int slot, cudaStream_t stream, const ListedGemm& l, void** ptrs);

// Diagnostics (tests): how many GEMM descriptions this process has timed (ATTNBWD_CUDA_LT_TUNE), and forgetting
// every process-wide choice and the count (contexts keep the choices they already cached).
int lt_timed_descriptions();
void lt_forget_timed_choices();
// Diagnostics (tests): how many pointer-array GEMMs (Gemm::pointer_array) this process has enqueued, by either route
// (cuBLASLt or ATTNBWD_CUDA_SANITIZE_GEMM=plain): shows that a form asked for by a switch ran.
long lt_pointer_array_gemms();

}  // namespace attnbwd::cuda
