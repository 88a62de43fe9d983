// Probe (not part of the library, not built by CMake): does cuBLASLt have faster configurations than the 8 its
// heuristic offers for gqa's small-T dX GEMMs (dA = dY·Wo and dXq = dQ·Wq), which run at 1.2-1.4 TB/s of their
// weight traffic at T = 293 (twenty-fourth session) and keep the heuristic's first answer when tuned? For each
// distinct (algorithm id, stages, cluster shape) among the heuristic's candidates, every tile the algorithm
// supports × split-K in {1, 2, 3, 4, 6, 8, 12, 16} (partials reduced in fp32), validated by cublasLtMatmulAlgoCheck,
// each timed cold (a 256 MB memset before every call, not timed; median of 5 event-timed calls). Prints the
// heuristic's first answer and the ten fastest configurations per GEMM. Row-major semantics as lt_gemm.cu.
//   nvcc -std=c++20 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_config_search.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <tuple>
#include <vector>

#include "lt_probe.cuh"

static cublasLtHandle_t lt;
static void* ws;
static const size_t kWs = 32u << 20;
static void* flush_buf;
static const size_t kFlush = 256u << 20;

template <class F>
float time_cold(cudaStream_t s, F&& f, int reps = 5) {
  return lt_time_cold(s, flush_buf, kFlush, f, reps);
}

struct G {
  int64_t M, N, K, lda, ldb, ldc;
  const char* name;
};

void search(const G& g, const void* A, const void* B, void* C) {
  cudaStream_t s = 0;
  cublasLtMatrixLayout_t first, second, out;  // C[M,N] = A[M,K]·B[K,N], row-major: column-major Cᵀ = Bᵀ·Aᵀ
  CK(cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, g.N, g.K, g.ldb));
  CK(cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, g.K, g.M, g.lda));
  CK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, g.N, g.M, g.ldc));
  cublasLtMatmulDesc_t d = lt_desc(false, false);
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, d, first, second, out, out, pref, 16, res, &found));
  const float alpha = 1, beta = 0;
  auto run = [&](const cublasLtMatmulAlgo_t& a) {
    return cublasLtMatmul(lt, d, &alpha, B, first, A, second, &beta, C, out, C, out, &a, ws, kWs, s);
  };
  const double mb = 2.0 * (g.M * g.K + g.K * g.N + g.M * g.N) / 1e6;
  const float first_us = time_cold(s, [&] { CK(run(res[0].algo)); });
  const LtAlgoConfig c0 = lt_config(res[0].algo);
  printf("%s M=%ld N=%ld K=%ld (%.1f MB): heuristic first answer tile=%d splitk=%d %.2f us (%.0f GB/s), %d offered\n",
         g.name, (long)g.M, (long)g.N, (long)g.K, mb, c0.tile, c0.splitk, first_us, mb / first_us * 1e3, found);
  std::set<std::tuple<int, int, int>> seen;
  struct R { float us; int id, tile, splitk, cluster; };
  std::vector<R> all;
  int tried = 0, valid = 0;
  for (int i = 0; i < found; ++i) {
    const LtAlgoConfig c = lt_config(res[i].algo);
    std::uint16_t cluster16 = 0;
    size_t sz = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster16, sizeof cluster16,
                                         &sz);
    const int cluster = cluster16;
    if (!seen.insert({c.id, c.stages, cluster}).second) continue;
    // The capability's size first: the call fails unless sizeInBytes is exactly the stored list's size.
    std::uint32_t tiles[256];
    size_t need = 0, written = 0;
    int ntiles = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &need) == 0 &&
        need > 0 && need <= sizeof tiles &&
        cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, need, &written) == 0)
      ntiles = static_cast<int>(written / sizeof(std::uint32_t));
    if (ntiles == 0 || (ntiles == 1 && tiles[0] == CUBLASLT_MATMUL_TILE_UNDEFINED)) {  // the algorithm's own tile only
      tiles[0] = static_cast<std::uint32_t>(c.tile);
      ntiles = 1;
    }
    std::int32_t sk_cap = 0;
    cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sk_cap, sizeof sk_cap, &sz);
    printf("   candidate %d: id=%d tile=%d stages=%d cluster=%d, %d tiles, split-K %s\n", i, c.id, c.tile, c.stages,
           cluster, ntiles, sk_cap ? "supported" : "not supported");
    for (int t = 0; t < ntiles; ++t)
      for (std::uint32_t sk : {1u, 2u, 3u, 4u, 6u, 8u, 12u, 16u}) {
        if (sk > 1 && !sk_cap) continue;
        cublasLtMatmulAlgo_t a = res[i].algo;
        const std::uint32_t scheme = sk == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof tiles[t]) != 0)
          continue;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk) != 0) continue;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme) != 0)
          continue;
        ++tried;
        cublasLtMatmulHeuristicResult_t chk{};
        if (cublasLtMatmulAlgoCheck(lt, d, first, second, out, out, &a, &chk) != CUBLAS_STATUS_SUCCESS) continue;
        if (chk.workspaceSize > kWs) continue;
        if (run(a) != CUBLAS_STATUS_SUCCESS) continue;
        ++valid;
        const float us = time_cold(s, [&] { run(a); }, 3);
        all.push_back({us, c.id, static_cast<int>(tiles[t]), static_cast<int>(sk), cluster});
      }
  }
  std::sort(all.begin(), all.end(), [](const R& x, const R& y) { return x.us < y.us; });
  printf("   %d configurations tried, %d valid; fastest:\n", tried, valid);
  for (size_t i = 0; i < all.size() && i < 10; ++i)
    printf("   id=%d tile=%d splitk=%d cluster=%d  %8.2f us  %6.0f GB/s  (%.2fx the first answer)\n", all[i].id,
           all[i].tile, all[i].splitk, all[i].cluster, all[i].us, mb / all[i].us * 1e3, first_us / all[i].us);
  lt_release(pref, d, {first, second, out});
}

int main() {
  lt_probe_setup(&lt, &ws, kWs, &flush_buf, kFlush);
  const int64_t HS = 5120, QP = 4096, QKV = QP + 2048, TMAX = 512;
  void *dY, *Wo, *dA, *dQKV, *Wq, *dXq;
  for (auto [p, bytes] : {std::pair<void**, int64_t>{&dY, TMAX * HS * 2}, {&Wo, HS * QP * 2}, {&dA, TMAX * QP * 2},
                          {&dQKV, TMAX * QKV * 2}, {&Wq, QP * HS * 2}, {&dXq, TMAX * HS * 2}}) {
    CK(cudaMalloc(p, bytes));
    CK(cudaMemset(*p, 0, bytes));
  }
  for (int64_t T : {131, 293, 512}) {
    search({T, QP, HS, HS, QP, QP, "dA=dY.Wo"}, dY, Wo, dA);
    search({T, HS, QP, QKV, HS, HS, "dXq=dQ.Wq"}, dQKV, Wq, dXq);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
