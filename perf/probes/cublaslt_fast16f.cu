// Probe (not part of the library, not built by CMake): can cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16F (fp32 A, B and C,
// the operands down-converted to fp16 for the tensor cores inside the library) replace the fp16 conversion passes
// that vision_mha_norm_backward and vision_varlen_rope_backward run before their projection GEMMs today (fp32 → fp16
// copies of the operands, then an fp16 GEMM)?
// For each GEMM of those ops (their sizes at a few workloads), timed alone with the L2 flushed before every call (a
// 256 MB memset, not timed; events around the timed work only; median of 9):
//   f16     fp16 A and B, fp32 C, CUBLAS_COMPUTE_32F (today's GEMM, without its conversions)
//   cvt     the fp32 → fp16 conversion of A and B (one grid-stride kernel per operand: today's passes)
//   fast16f fp32 A, B, C, CUBLAS_COMPUTE_32F_FAST_16F (no conversion pass)
//   tf32    fp32 A, B, C, CUBLAS_COMPUTE_32F_FAST_TF32 (for reference)
// and the difference of fast16f's result from f16's on the same (rounded-to-nearest) operands: max |diff| relative to
// max |C| and the relative L2 error; equal up to the sum order if the library rounds to nearest as the passes do.
// The heuristic's first answer in each mode. Column-major GEMMs C[m, n] = op(A) · op(B) with the ops' layouts.
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_fast16f.cu -lcublasLt
// ./probe N runs shape N alone; under ncu (--print-summary per-kernel) it shows which kernels fast16f launches (whether the library converts in a
// pass of its own).
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lt_probe.cuh"

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  std::int64_t m, n, k;
};

cublasLtHandle_t lt;
void* ws;
constexpr std::size_t kWs = 64u << 20;
void* flush_buf;
constexpr std::size_t kFlush = 256u << 20;

__global__ void to_half(const float* __restrict__ x, __half* __restrict__ y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n / 4;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 o;
    std::memcpy(&o.x, &a, 4);
    std::memcpy(&o.y, &b, 4);
    reinterpret_cast<uint2*>(y)[i] = o;
  }
}

__global__ void fill(float* x, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    x[i] = (static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f) * 2.0f;
  }
}

struct Mode {
  const char* name;
  cublasComputeType_t compute;
  cudaDataType_t ab;
};

// One cuBLASLt GEMM in `mode`: its first heuristic answer, or false where there is none.
bool matmul(const Shape& s, const Mode& mode, const void* A, const void* B, float* C, cudaStream_t st, bool run,
            int* algos = nullptr) {
  cublasLtMatmulDesc_t d;
  CK(cublasLtMatmulDescCreate(&d, mode.compute, CUDA_R_32F));
  const cublasOperation_t oa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
  cublasLtMatrixLayout_t la, lb, lc;
  CK(cublasLtMatrixLayoutCreate(&la, mode.ab, s.ta ? s.k : s.m, s.ta ? s.m : s.k, s.ta ? s.k : s.m));
  CK(cublasLtMatrixLayoutCreate(&lb, mode.ab, s.tb ? s.n : s.k, s.tb ? s.k : s.n, s.tb ? s.n : s.k));
  CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.m, s.n, s.m));
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  cublasLtMatmulHeuristicResult_t h[8];
  int n = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 8, h, &n);
  if (algos) *algos = hs == CUBLAS_STATUS_SUCCESS ? n : -static_cast<int>(hs);
  const bool ok = hs == CUBLAS_STATUS_SUCCESS && n > 0;
  if (ok && run) {
    const float one = 1.0f, zero = 0.0f;
    CK(cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, C, lc, C, lc, &h[0].algo, ws, kWs, st));
  }
  lt_release(pref, d, {la, lb, lc});
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;  // run only this shape (for ncu)
  lt_probe_setup(&lt, &ws, kWs, &flush_buf, kFlush);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  const Mode f16{"f16", CUBLAS_COMPUTE_32F, CUDA_R_16F}, fast{"fast16f", CUBLAS_COMPUTE_32F_FAST_16F, CUDA_R_32F},
      tf32{"tf32", CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F};
  // mha (embed 1024, qkv 3072) at B = 23 (T = 13271) and B = 1 (T = 577); varlen (hidden 3584, qkv 10752) at
  // S = 131, 1024, 8192. dX-like: C[out=in_f, n=T] = W · dYᵀ (NN); dW-like: C[in, out] = Xᵀ·dY over T (NT);
  // forward-like (varlen's recompute): C[qkv, S] = Wᵀ(T) · Xᵀ.
  const Shape shapes[] = {
      {"mha23 dA (1024x13271x1024)", false, false, 1024, 13271, 1024},
      {"mha23 dWo (1024x1024xT)", false, true, 1024, 1024, 13271},
      {"mha23 dXn (1024x13271x3072)", false, false, 1024, 13271, 3072},
      {"mha23 dWqkv (1024x3072xT)", false, true, 1024, 3072, 13271},
      {"mha1 dA (1024x577x1024)", false, false, 1024, 577, 1024},
      {"mha1 dWqkv (1024x3072x577)", false, true, 1024, 3072, 577},
      {"vl131 qkv fwd (10752x131x3584)", true, false, 10752, 131, 3584},
      {"vl1024 qkv fwd (10752x1024x3584)", true, false, 10752, 1024, 3584},
      {"vl8192 qkv fwd (10752x8192x3584)", true, false, 10752, 8192, 3584},
      {"vl8192 dWqkv (3584x10752x8192)", false, true, 3584, 10752, 8192},
  };
  for (int si = 0; si < static_cast<int>(sizeof shapes / sizeof shapes[0]); ++si) {
    if (only >= 0 && si != only) continue;
    const Shape& s = shapes[si];
    const std::int64_t na = s.m * s.k, nb = s.k * s.n, nc = s.m * s.n;
    float *A, *B, *C1, *C2, *C3;
    __half *Ah, *Bh;
    CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&B, nb * 4));
    CK(cudaMalloc(&Ah, na * 2));
    CK(cudaMalloc(&Bh, nb * 2));
    CK(cudaMalloc(&C1, nc * 4));
    CK(cudaMalloc(&C2, nc * 4));
    CK(cudaMalloc(&C3, nc * 4));
    fill<<<1024, 256, 0, st>>>(A, na, 1u);
    fill<<<1024, 256, 0, st>>>(B, nb, 2u);
    const auto cvt = [&] {
      to_half<<<1056, 256, 0, st>>>(A, Ah, na);
      to_half<<<1056, 256, 0, st>>>(B, Bh, nb);
    };
    cvt();
    CK(cudaStreamSynchronize(st));
    int n16 = 0, nf = 0, nt = 0;
    const bool ok16 = matmul(s, f16, Ah, Bh, C1, st, true, &n16);
    const bool okf = matmul(s, fast, A, B, C2, st, true, &nf);
    const bool okt = matmul(s, tf32, A, B, C3, st, true, &nt);
    CK(cudaStreamSynchronize(st));
    const double flop = 2.0 * s.m * s.n * s.k;
    const auto us = [&](auto&& f) { return lt_time_cold(st, flush_buf, kFlush, f, 9); };
    const float t16 = ok16 ? us([&] { matmul(s, f16, Ah, Bh, C1, st, true); }) : -1;
    const float tc = us(cvt);
    const float tf = okf ? us([&] { matmul(s, fast, A, B, C2, st, true); }) : -1;
    const float tt = okt ? us([&] { matmul(s, tf32, A, B, C3, st, true); }) : -1;
    std::vector<float> h1(nc), h2(nc);
    CK(cudaMemcpy(h1.data(), C1, nc * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), C2, nc * 4, cudaMemcpyDeviceToHost));
    double mx = 0, md = 0, s2 = 0, d2 = 0;
    for (std::int64_t i = 0; i < nc; ++i) {
      mx = std::fmax(mx, std::fabs(h1[i]));
      const double d = static_cast<double>(h2[i]) - h1[i];
      md = std::fmax(md, std::fabs(d));
      s2 += static_cast<double>(h1[i]) * h1[i], d2 += d * d;
    }
    std::printf("%-34s algos f16 %d fast16f %d tf32 %d | f16 %8.1f us (%5.0f TF/s) + cvt %7.1f = %8.1f | fast16f %8.1f us "
                "(%5.0f TF/s) | tf32 %8.1f us | fast16f-f16: max|d|/max|C| %.2e relL2 %.2e\n",
                s.name, n16, nf, nt, t16, flop / t16 * 1e-6, tc, t16 + tc, tf, flop / tf * 1e-6, tt,
                okf && ok16 ? md / mx : -1.0, okf && ok16 ? std::sqrt(d2 / s2) : -1.0);
    std::fflush(stdout);
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(Ah));
    CK(cudaFree(Bh));
    CK(cudaFree(C1));
    CK(cudaFree(C2));
    CK(cudaFree(C3));
  }
  return 0;
}
