// Probe (not part of the library, not built by CMake): can gqa's dA = dY·Wo write the head-split dO [B, Hq, S, D]
// directly, dropping the head_split copy after it (10-22 µs per call at the six large-B workloads; forty-third
// session's timelines)? dO[b, h] = dY_b · Wo[:, h·D : (h+1)·D] is B·Hq GEMMs of S × D × hidden whose operand
// addresses are not one stride apart (b and h move A and B independently), so cuBLASLt's pointer-array batch mode
// (CUBLASLT_BATCH_MODE_POINTER_ARRAY, cuBLASLt 12.9+/13) is the only one-call form. For each (B, S) of gqa's large-B
// workloads this times, cold (a 256 MB write before every call, untimed; median of 7 event-timed calls):
//   strided: the whole dA [T, 4096] by the heuristic's first answer and by the fastest of its candidates, plus a
//            16-byte head-split copy into dO (what the library does today, in pieces of 2048 rows from T = 3072);
//   pointer array: B·Hq GEMMs straight into dO, the heuristic's first answer and its fastest candidate;
// and checks that both forms give the same dO (max |difference| in bf16 units; cuBLASLt may choose other K orders, so
// a few units are possible; the library's tolerance is far wider). Row-major semantics as backends/cuda/lt_gemm.cu.
//   nvcc -std=c++20 -O2 -arch=sm_90a -o probe perf/probes/cublaslt_da_pointer_array.cu -lcublasLt && ./probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <utility>
#include <vector>

#include "lt_probe.cuh"

namespace {

constexpr int64_t kHidden = 5120, kHq = 32, kD = 128, kQP = kHq * kD;
constexpr int kCandidates = 8;
constexpr std::size_t kWs = 32u << 20, kFlush = 256u << 20;

cublasLtHandle_t lt;
void* ws;
void* flush_buf;

__global__ void fill(__nv_bfloat16* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = __float2bfloat16((static_cast<float>(x & 0xffff) / 65536.0f - 0.5f) * 0.25f);
  }
}

// dO[b, h, s, :] = dA[b·S + s, h·D : (h+1)·D], eight bf16 (16 bytes) per thread.
__global__ void head_split(const __nv_bfloat16* dA, __nv_bfloat16* dO, int64_t T, int64_t S) {
  const int64_t n = T * kQP / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * 8, t = e / kQP, c = e % kQP, h = c / kD, d = c % kD, b = t / S, s = t % S;
    reinterpret_cast<uint4*>(dO)[((b * kHq + h) * S + s) * kD / 8 + d / 8] = reinterpret_cast<const uint4*>(dA)[i];
  }
}

__global__ void max_ulps(const __nv_bfloat16* x, const __nv_bfloat16* y, std::size_t n, unsigned* out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const int a = __bfloat16_as_ushort(x[i]), b = __bfloat16_as_ushort(y[i]);
    const int ia = (a & 0x8000) ? -(a & 0x7fff) : a, ib = (b & 0x8000) ? -(b & 0x7fff) : b;  // ordered integers
    atomicMax(out, static_cast<unsigned>(ia > ib ? ia - ib : ib - ia));
  }
}

void release(cublasLtMatmulDesc_t d, std::initializer_list<cublasLtMatrixLayout_t> layouts) {
  cublasLtMatmulDescDestroy(d);
  for (cublasLtMatrixLayout_t l : layouts) cublasLtMatrixLayoutDestroy(l);
}

struct Timed {
  float first = -1, best = -1;
  int best_index = -1, found = 0;
};

// Times the heuristic's candidates for (d, a, b, c) with pointers (pa, pb, pc) on stream 0, cold; `after` (untimed
// alone, timed with each call) runs after the GEMM, e.g. the head-split copy.
template <class After>
Timed time_candidates(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                      cublasLtMatrixLayout_t c, const void* pa, const void* pb, void* pc, After&& after) {
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  cublasLtMatmulHeuristicResult_t res[kCandidates] = {};
  Timed t;
  if (cublasLtMatmulAlgoGetHeuristic(lt, d, a, b, c, c, pref, kCandidates, res, &t.found) != CUBLAS_STATUS_SUCCESS)
    t.found = 0;
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < t.found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = true;
    const float us = lt_time_cold(
        0, flush_buf, kFlush,
        [&] {
          if (cublasLtMatmul(lt, d, &one, pa, a, pb, b, &zero, pc, c, pc, c, &res[i].algo, ws, kWs, 0) !=
              CUBLAS_STATUS_SUCCESS)
            ok = false;
          after();
        },
        7);
    if (!ok) continue;
    if (i == 0) t.first = us;
    if (t.best < 0 || us < t.best) t.best = us, t.best_index = i;
  }
  // The result the caller compares: the first answer's (rerun once, so that pc holds it).
  if (t.found > 0) {
    CK(cublasLtMatmul(lt, d, &one, pa, a, pb, b, &zero, pc, c, pc, c, &res[0].algo, ws, kWs, 0));
    after();
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return t;
}

void probe(int64_t B, int64_t S) {
  const int64_t T = B * S, count = B * kHq;
  __nv_bfloat16 *dY, *Wo, *dA, *dO_split, *dO_direct;
  CK(cudaMalloc(&dY, T * kHidden * 2));
  CK(cudaMalloc(&Wo, kHidden * kQP * 2));
  CK(cudaMalloc(&dA, T * kQP * 2));
  CK(cudaMalloc(&dO_split, T * kQP * 2));
  CK(cudaMalloc(&dO_direct, T * kQP * 2));
  fill<<<1024, 256>>>(dY, T * kHidden, 1u);
  fill<<<1024, 256>>>(Wo, kHidden * kQP, 2u);
  CK(cudaMemset(dO_direct, 0xff, T * kQP * 2));  // NaN: an element the direct form leaves unwritten fails the check

  // Strided: row-major dA[T, QP] = dY[T, hidden]·Wo[hidden, QP]; column-major dAᵀ = Woᵀ·dYᵀ.
  cublasLtMatmulDesc_t d = lt_desc(false, false);
  cublasLtMatrixLayout_t la, lb, lc;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, kQP, kHidden, kQP));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, kHidden, T, kHidden));
  CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, kQP, T, kQP));
  const Timed plain = time_candidates(d, la, lb, lc, Wo, dY, dA, [] {});
  const Timed split = time_candidates(d, la, lb, lc, Wo, dY, dA, [&] { head_split<<<1056, 256>>>(dA, dO_split, T, S); });
  release(d, {la, lb, lc});

  // Pointer array: for i = b·Hq + h, column-major dO[b, h]ᵀ [D, S] (ld D) = (Wo's columns h·D..)ᵀ [D, hidden]
  // (ld QP) · dY_bᵀ [hidden, S] (ld hidden).
  std::vector<const void*> ha(count), hb(count);
  std::vector<void*> hc(count);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < kHq; ++h) {
      const int64_t i = b * kHq + h;
      ha[i] = Wo + h * kD;
      hb[i] = dY + b * S * kHidden;
      hc[i] = dO_direct + i * S * kD;
    }
  void **pa, **pb, **pc;
  CK(cudaMalloc(&pa, count * sizeof(void*)));
  CK(cudaMalloc(&pb, count * sizeof(void*)));
  CK(cudaMalloc(&pc, count * sizeof(void*)));
  CK(cudaMemcpy(pa, ha.data(), count * sizeof(void*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pb, hb.data(), count * sizeof(void*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pc, hc.data(), count * sizeof(void*), cudaMemcpyHostToDevice));
  cublasLtMatmulDesc_t dp = lt_desc(false, false);
  cublasLtMatrixLayout_t pla, plb, plc;
  CK(cublasLtMatrixLayoutCreate(&pla, CUDA_R_16BF, kD, kHidden, kQP));
  CK(cublasLtMatrixLayoutCreate(&plb, CUDA_R_16BF, kHidden, S, kHidden));
  CK(cublasLtMatrixLayoutCreate(&plc, CUDA_R_16BF, kD, S, kD));
  const std::int32_t batch = static_cast<std::int32_t>(count);
  const std::uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
  for (cublasLtMatrixLayout_t l : {pla, plb, plc}) {
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
  }
  const Timed direct = time_candidates(dp, pla, plb, plc, pa, pb, pc, [] {});
  release(dp, {pla, plb, plc});

  unsigned* dmax;
  CK(cudaMalloc(&dmax, sizeof(unsigned)));
  CK(cudaMemset(dmax, 0, sizeof(unsigned)));
  max_ulps<<<1024, 256>>>(dO_split, dO_direct, T * kQP, dmax);
  unsigned ulps = 0;
  CK(cudaMemcpy(&ulps, dmax, sizeof ulps, cudaMemcpyDeviceToHost));
  CK(cudaDeviceSynchronize());
  std::printf("B %2lld S %4lld T %5lld | strided dA first %7.1f best %7.1f (cand %d of %d) | + head_split first %7.1f "
              "best %7.1f | pointer array first %7.1f best %7.1f (cand %d of %d) | max diff %u bf16 units%s\n",
              (long long)B, (long long)S, (long long)T, plain.first, plain.best, plain.best_index, plain.found, split.first,
              split.best, direct.first, direct.best, direct.best_index, direct.found, ulps,
              direct.found == 0 ? " (no pointer-array algorithm)" : "");
  for (void* p : {(void*)dY, (void*)Wo, (void*)dA, (void*)dO_split, (void*)dO_direct, (void*)pa, (void*)pb, (void*)pc,
                  (void*)dmax})
    cudaFree(p);
}

}  // namespace

int main() {
  lt_probe_setup(&lt, &ws, kWs, &flush_buf, kFlush);
  // gqa's large-B workloads (#3, #10, #9, #8, #15, #14) and the 2048-row piece the library uses from T = 3072.
  for (const auto& bs : std::vector<std::pair<int64_t, int64_t>>{{16, 256}, {8, 384}, {4, 1024}, {16, 128}, {4, 512},
                                                                {2, 1024}, {8, 256}})
    probe(bs.first, bs.second);
  return 0;
}
