// Probe (not part of the library, not built by CMake): which cuBLASLt algorithms the heuristic offers for
// gqa's four batched attention GEMMs at S = 131, 293, 449, 691 (not multiples of 8) and at 128, 296, and how
// fast each candidate and cublasGemmStridedBatchedEx run (median of 15 event-timed calls, each including
// launch overhead). Row-major semantics as backends/cuda/lt_gemm.cu. Build and run on the GPU machine:
//   nvcc -std=c++20 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_batched_odd_s.cu -lcublasLt -lcublas
// Its output of 2026-12-01 (H200): perf/results/h200-2026-12-01-cublaslt-odd-s-probe.txt.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "lt_probe.cuh"

struct G { bool ta, tb; int64_t M, N, K, lda, ldb, ldc; int count; int64_t sa, sb, sc; const char* name; };

static cublasLtHandle_t lt;
static cublasHandle_t hb;
static void* ws;
static const size_t kWs = 32u << 20;

int align_of(const void* p, int64_t ld, int64_t st) {
  uint64_t a = (uint64_t)(uintptr_t)p | (uint64_t)(ld * 2) | (uint64_t)(st * 2) | 16u;
  return (int)(a & (~a + 1));
}

float time_it(cudaStream_t s, auto&& f) {
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ts;
  for (int i = 0; i < 15; ++i) { cudaEventRecord(e0, s); f(); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000); }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

void run(const G& g, const void* A, const void* B, void* C) {
  cudaStream_t s = 0;
  cublasLtMatrixLayout_t first, second, out;
  CK(cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.ldb));
  CK(cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.lda));
  CK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, g.N, g.M, g.ldc));
  auto batch = [&](cublasLtMatrixLayout_t l, int64_t st) {
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &g.count, sizeof g.count));
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
  };
  batch(first, g.sb); batch(second, g.sa); batch(out, g.sc);
  cublasLtMatmulDesc_t d = lt_desc(g.tb, g.ta);
  const cublasOperation_t o1 = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  uint32_t a1 = align_of(B, g.ldb, g.sb), a2 = align_of(A, g.lda, g.sa), a3 = align_of(C, g.ldc, g.sc);
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a1, sizeof a1));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a2, sizeof a2));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a3, sizeof a3));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a3, sizeof a3));
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, d, first, second, out, out, pref, 16, res, &found));
  const double gf = 2.0 * g.M * g.N * g.K * g.count / 1e9;
  printf("%s M=%ld N=%ld K=%ld count=%d lda=%ld ldb=%ld ldc=%ld align A/B/C=%u/%u/%u  (%.3f GFLOP) found %d\n", g.name,
         (long)g.M, (long)g.N, (long)g.K, g.count, (long)g.lda, (long)g.ldb, (long)g.ldc, a2, a1, a3, gf, found);
  const float alpha = 1, beta = 0;
  for (int i = 0; i < found; ++i) {
    const LtAlgoConfig c = lt_config(res[i].algo);
    const float us = time_it(s, [&] {
      CK(cublasLtMatmul(lt, d, &alpha, B, first, A, second, &beta, C, out, C, out, &res[i].algo, ws, kWs, s));
    });
    printf("   lt[%d] id=%d tile=%d splitk=%d stages=%d waves=%.2f ws=%zu  %8.2f us  %6.1f TF/s\n", i, c.id, c.tile, c.splitk, c.stages,
           res[i].wavesCount, res[i].workspaceSize, us, gf / us * 1e3);
  }
  // cuBLAS (non-Lt): column-major C^T[N,M] = op(B)^T op(A)^T.
  const float us = time_it(s, [&] {
    CK(cublasGemmStridedBatchedEx(hb, o1, o2, (int)g.N, (int)g.M, (int)g.K, &alpha, B, CUDA_R_16BF, (int)g.ldb, g.sb, A,
                                  CUDA_R_16BF, (int)g.lda, g.sa, &beta, C, CUDA_R_16BF, (int)g.ldc, g.sc, g.count,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  printf("   cublasGemmStridedBatchedEx %8.2f us  %6.1f TF/s\n", us, gf / us * 1e3);
  cublasLtMatmulPreferenceDestroy(pref); cublasLtMatmulDescDestroy(d);
  cublasLtMatrixLayoutDestroy(first); cublasLtMatrixLayoutDestroy(second); cublasLtMatrixLayoutDestroy(out);
}

int main() {
  CK(cublasLtCreate(&lt)); CK(cublasCreate(&hb));
  CK(cudaMalloc(&ws, kWs));
  CK(cublasSetWorkspace(hb, ws, kWs));
  const int64_t D = 128;
  struct W { int64_t B, S; } ws_[] = {{1, 131}, {1, 293}, {2, 449}, {1, 691}, {1, 128}, {1, 296}};
  for (auto w : ws_) {
    const int64_t S = w.S, ld = (S + 7) / 8 * 8, BH = w.B * 32;
    void *P, *dO, *V, *dS, *out;
    CK(cudaMalloc(&P, BH * S * S * 2)); CK(cudaMalloc(&dO, BH * S * D * 2)); CK(cudaMalloc(&V, BH * S * D * 2));
    CK(cudaMalloc(&dS, BH * S * ld * 2)); CK(cudaMalloc(&out, BH * S * D * 2));
    cudaMemset(P, 0, BH * S * S * 2); cudaMemset(dO, 0, BH * S * D * 2); cudaMemset(V, 0, BH * S * D * 2); cudaMemset(dS, 0, BH * S * ld * 2);
    const int c = (int)BH;
    printf("==== B=%ld S=%ld\n", (long)w.B, (long)S);
    run({false, true, S, S, D, D, D, ld, c, S * D, S * D, S * ld, "dP=dO.V^T"}, dO, V, dS);
    run({true, false, S, D, S, S, D, D, c, S * S, S * D, S * D, "dV=P^T.dO"}, P, dO, out);
    run({false, false, S, D, S, ld, D, D, c, S * ld, S * D, S * D, "dQ=dS.K"}, dS, V, out);
    run({true, false, S, D, S, ld, D, D, c, S * ld, S * D, S * D, "dK=dS^T.Q"}, dS, V, out);
    cudaFree(P); cudaFree(dO); cudaFree(V); cudaFree(dS); cudaFree(out);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
