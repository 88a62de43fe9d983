// Probe (not part of the library, not built by CMake): do cuBLASLt's nvjet kernels take gqa's padded attention GEMMs
// when only ONE extent is the odd S (the others S8 = S rounded up to 8, every leading dimension and batch stride
// 16-byte aligned)? cublaslt_batched_odd_s.cu found the sm75-class kernels (algorithm id 24, 2-3x slower) where every
// extent was odd; the padded path (ATTNBWD_CUDA_GQA_PAD) copies Q, K, V to S8 rows per head so that no extent is.
// If one odd extent keeps nvjet, the copies of K (dQ = dS·K with K = S), Q (dK32 = dSᵀ·Q with K = S, per query head)
// and V (dP = dO·Vᵀ with N = S) are not needed: ~34 MB of the pad launch's 45 at #0 (perf/NOTES.md, fortieth session).
// Per GEMM: every candidate of the heuristic (id, time: median of 15 event-timed calls after 3 untimed).
//   nvcc -std=c++20 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_odd_one_dim.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "lt_probe.cuh"

struct G {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  int count;
  int64_t sa, sb, sc;
  const char* name;
};

static cublasLtHandle_t lt;
static void* ws;
static const size_t kWs = 32u << 20;

static float time_us(cudaStream_t s, auto&& f) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ts;
  for (int i = 0; i < 15; ++i) {
    cudaEventRecord(e0, s), f(), cudaEventRecord(e1, s), cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms * 1000);
  }
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return ts[ts.size() / 2];
}

static void run(const G& g, const void* A, const void* B, void* C) {
  cudaStream_t s = 0;
  cublasLtMatrixLayout_t first, second, out;
  CK(cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.ldb));
  CK(cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.lda));
  CK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, g.N, g.M, g.ldc));
  const auto batch = [&](cublasLtMatrixLayout_t l, int64_t st) {
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &g.count, sizeof g.count));
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
  };
  batch(first, g.sb), batch(second, g.sa), batch(out, g.sc);
  cublasLtMatmulDesc_t d = lt_desc(g.tb, g.ta);
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  const uint32_t al = 16;
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CK(cublasLtMatmulPreferenceSetAttribute(pref, a, &al, sizeof al));
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, d, first, second, out, out, pref, 16, res, &found));
  const double gf = 2.0 * g.M * g.N * g.K * g.count / 1e9;
  printf("%-10s M=%ld N=%ld K=%ld count=%d (%.2f GFLOP):", g.name, (long)g.M, (long)g.N, (long)g.K, g.count, gf);
  const float alpha = 1, beta = 0;
  float best = 1e30f;
  for (int i = 0; i < found; ++i) {
    const LtAlgoConfig c = lt_config(res[i].algo);
    const float us = time_us(s, [&] {
      CK(cublasLtMatmul(lt, d, &alpha, B, first, A, second, &beta, C, out, C, out, &res[i].algo, ws, kWs, s));
    });
    best = std::min(best, us);
    printf(" %d:%.1f", c.id, us);
  }
  printf("  | first %s best %.1f us\n", found ? "" : "none", best);
  cublasLtMatmulPreferenceDestroy(pref), cublasLtMatmulDescDestroy(d);
  cublasLtMatrixLayoutDestroy(first), cublasLtMatrixLayoutDestroy(second), cublasLtMatrixLayoutDestroy(out);
}

int main() {
  CK(cublasLtCreate(&lt));
  CK(cudaMalloc(&ws, kWs));
  const int64_t D = 128;
  struct W {
    int64_t B, S;
  } wl[] = {{1, 293}, {2, 449}, {1, 691}, {1, 131}};
  for (const W w : wl) {
    const int64_t S = w.S, Sp = (S + 7) / 8 * 8, BH = w.B * 32;
    void *X, *Y, *Z;  // operands (zeros: the rate, not the values, is probed), [BH, Sp, Sp] at most each
    CK(cudaMalloc(&X, BH * Sp * Sp * 2));
    CK(cudaMalloc(&Y, BH * Sp * Sp * 2));
    CK(cudaMalloc(&Z, BH * Sp * Sp * 2));
    cudaMemset(X, 0, BH * Sp * Sp * 2), cudaMemset(Y, 0, BH * Sp * Sp * 2), cudaMemset(Z, 0, BH * Sp * Sp * 2);
    const int c = static_cast<int>(BH), g = static_cast<int>(BH / 4);
    printf("==== B=%ld S=%ld Sp=%ld\n", (long)w.B, (long)S, (long)Sp);
    // dP = dO·Vᵀ: today (Vp: Sp rows per head), and V unpadded (N = S, V's head stride S·D; dS's ld stays Sp)
    run({false, true, Sp, Sp, D, D, D, Sp, c, Sp * D, Sp * D, Sp * Sp, "dP pad"}, X, Y, Z);
    run({false, true, Sp, S, D, D, D, Sp, c, Sp * D, S * D, Sp * Sp, "dP N=S"}, X, Y, Z);
    // dQ = dS·K: today (Kp), and K unpadded (K = S over the keys)
    run({false, false, Sp, D, Sp, Sp, D, D, c, Sp * Sp, Sp * D, Sp * D, "dQ pad"}, X, Y, Z);
    run({false, false, Sp, D, S, Sp, D, D, c, Sp * Sp, S * D, Sp * D, "dQ K=S"}, X, Y, Z);
    // dK32 = dSᵀ·Q per query head: today (Qp), Q unpadded (K = S over the queries), and today's group form (count B·8,
    // K = 4·Sp), which needs Qp
    run({true, false, Sp, D, Sp, Sp, D, D, c, Sp * Sp, Sp * D, Sp * D, "dK pad"}, X, Y, Z);
    run({true, false, Sp, D, S, Sp, D, D, c, Sp * Sp, S * D, Sp * D, "dK K=S"}, X, Y, Z);
    run({true, false, Sp, D, 4 * Sp, Sp, D, D, g, 4 * Sp * Sp, 4 * Sp * D, Sp * D, "dK grp"}, X, Y, Z);
    cudaFree(X), cudaFree(Y), cudaFree(Z);
  }
  CK(cudaDeviceSynchronize());
  printf("done\n");
  return 0;
}
