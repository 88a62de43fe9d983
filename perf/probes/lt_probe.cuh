// Shared pieces of the cuBLASLt probes in this folder (not part of the library, not built by CMake): the
// error check, a matmul descriptor (fp32 compute and scale, the two operand transposes), a preference
// (workspace size, split-K reduced in the compute type or not at all) and an algorithm's configuration.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                \
  do {                                                       \
    auto e_ = (x);                                           \
    if ((int)e_ != 0) {                                      \
      printf("ERR %s:%d %d\n", __FILE__, __LINE__, (int)e_); \
      exit(1);                                               \
    }                                                        \
  } while (0)

// op(first) and op(second) of cublasLtMatmul (column-major view), fp32 accumulation.
inline cublasLtMatmulDesc_t lt_desc(bool trans_first, bool trans_second) {
  cublasLtMatmulDesc_t d;
  CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t o1 = trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &o1, sizeof o1));
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &o2, sizeof o2));
  return d;
}

// As backends/cuda/lt_gemm.cu asks: up to `workspace` bytes, split-K partials reduced in fp32 or none.
inline cublasLtMatmulPreference_t lt_pref(std::uint64_t workspace) {
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  return pref;
}

struct LtAlgoConfig {
  int id = -1, tile = -1, splitk = -1, stages = -1;
};

inline LtAlgoConfig lt_config(const cublasLtMatmulAlgo_t& algo) {
  LtAlgoConfig c;
  size_t sz;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &sz);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile, &sz);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof c.splitk, &sz);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages, &sz);
  return c;
}

// Median of `reps` event-timed calls of f() on stream s, each after an untimed prep() (after one untimed prep() and
// call first); in microseconds.
template <class P, class F>
float lt_time(cudaStream_t s, P&& prep, F&& f, int reps) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  prep();
  f();
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    prep();
    cudaEventRecord(e0, s);
    f();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms * 1000);
  }
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ts[ts.size() / 2];
}

// lt_time with a write of `flush_bytes` at `flush` before every call (cold L2; the write is not timed).
template <class F>
float lt_time_cold(cudaStream_t s, void* flush, std::size_t flush_bytes, F&& f, int reps) {
  int i = 0;
  return lt_time(s, [&] { cudaMemsetAsync(flush, i++, flush_bytes, s); }, f, reps);
}

// The handle, the GEMMs' workspace and the flush buffer every probe sets up first.
inline void lt_probe_setup(cublasLtHandle_t* lt, void** ws, std::size_t ws_bytes, void** flush, std::size_t flush_bytes) {
  CK(cublasLtCreate(lt));
  CK(cudaMalloc(ws, ws_bytes));
  CK(cudaMalloc(flush, flush_bytes));
}

inline void lt_release(cublasLtMatmulPreference_t pref, cublasLtMatmulDesc_t d,
                       std::initializer_list<cublasLtMatrixLayout_t> layouts) {
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(d);
  for (cublasLtMatrixLayout_t l : layouts) cublasLtMatrixLayoutDestroy(l);
}
