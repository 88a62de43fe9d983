// Probe (not part of the library, not built by CMake): gqa's projection GEMMs at small T (T = B·S ≤ 512),
// where each is bound by moving one 5120 × 4096 (or × 1024) bf16 weight or weight gradient, not by its
// FLOPs. For each GEMM: every candidate cuBLASLt's heuristic offers (up to 24), each timed alone with the L2
// flushed before every call (a 256 MB memset, not timed; events around the GEMM only; median of 9), with its
// rate in TFLOP/s and in GB/s of the minimum traffic (A, B read once, C written once). Row-major semantics as
// backends/cuda/lt_gemm.cu. Build and run on the GPU machine:
//   nvcc -std=c++20 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_small_t_proj.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lt_probe.cuh"

struct G {
  bool ta;
  int64_t M, N, K, lda, ldb, ldc;
  const char* name;
};

static cublasLtHandle_t lt;
static void* ws;
static const size_t kWs = 32u << 20;
static void* flush_buf;
static const size_t kFlush = 256u << 20;

float time_cold(cudaStream_t s, auto&& f) { return lt_time_cold(s, flush_buf, kFlush, f, 9); }

void run(const G& g, const void* A, const void* B, void* C) {
  cudaStream_t s = 0;
  cublasLtMatrixLayout_t first, second, out;
  CK(cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, g.N, g.K, g.ldb));
  CK(cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.lda));
  CK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, g.N, g.M, g.ldc));
  cublasLtMatmulDesc_t d = lt_desc(false, g.ta);
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  cublasLtMatmulHeuristicResult_t res[24];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, d, first, second, out, out, pref, 24, res, &found));
  const double gf = 2.0 * g.M * g.N * g.K / 1e9;
  const double mb = 2.0 * (g.M * g.K + g.K * g.N + g.M * g.N) / 1e6;
  printf("%s M=%ld N=%ld K=%ld (%.2f GFLOP, %.1f MB) found %d\n", g.name, (long)g.M, (long)g.N, (long)g.K, gf, mb,
         found);
  const float alpha = 1, beta = 0;
  float best = 1e30f;
  int best_i = -1;
  for (int i = 0; i < found; ++i) {
    const LtAlgoConfig c = lt_config(res[i].algo);
    const float us = time_cold(s, [&] {
      CK(cublasLtMatmul(lt, d, &alpha, B, first, A, second, &beta, C, out, C, out, &res[i].algo, ws, kWs, s));
    });
    if (us < best) best = us, best_i = i;
    printf("   lt[%2d] id=%d tile=%d splitk=%d stages=%d waves=%.2f ws=%zu  %8.2f us  %6.1f TF/s  %6.0f GB/s\n", i, c.id,
           c.tile, c.splitk, c.stages, res[i].wavesCount, res[i].workspaceSize, us, gf / us * 1e3, mb / us * 1e3);
  }
  printf("   best lt[%d] %.2f us\n", best_i, best);
  lt_release(pref, d, {first, second, out});
}

int main() {
  lt_probe_setup(&lt, &ws, kWs, &flush_buf, kFlush);
  const int64_t HS = 5120, QP = 4096, KP = 1024, QKV = QP + 2 * KP, TMAX = 512;
  struct Buf { void* p; int64_t bytes; };
  Buf b[] = {{nullptr, TMAX * HS * 2}, {nullptr, TMAX * QP * 2}, {nullptr, HS * QP * 2}, {nullptr, HS * QP * 2},
             {nullptr, TMAX * QP * 2}, {nullptr, TMAX * QKV * 2}, {nullptr, TMAX * HS * 2}, {nullptr, QP * HS * 2},
             {nullptr, QP * HS * 2}, {nullptr, TMAX * HS * 2}};
  for (Buf& x : b) {
    CK(cudaMalloc(&x.p, x.bytes));
    CK(cudaMemset(x.p, 0, x.bytes));
  }
  void *dY = b[0].p, *Aattn = b[1].p, *Wo = b[2].p, *dWo = b[3].p, *dA = b[4].p, *dQKV = b[5].p, *X = b[6].p,
       *Wq = b[7].p, *dWq = b[8].p, *dXq = b[9].p;
  for (int64_t T : {128, 131, 256, 293, 512}) {
    printf("==== T=%ld\n", (long)T);
    run({true, HS, QP, T, HS, QP, QP, "dWo=dY^T.A"}, dY, Aattn, dWo);
    run({false, T, QP, HS, HS, QP, QP, "dA=dY.Wo"}, dY, Wo, dA);
    run({true, QP, HS, T, QKV, HS, HS, "dWq=dQ^T.X"}, dQKV, X, dWq);
    run({true, KP, HS, T, QKV, HS, HS, "dWk=dK^T.X"}, dQKV, X, dWq);
    run({false, T, HS, QP, QKV, HS, HS, "dXq=dQ.Wq"}, dQKV, Wq, dXq);
    run({false, T, HS, KP, QKV, HS, HS, "dXk=dK.Wk"}, dQKV, Wq, dXq);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
