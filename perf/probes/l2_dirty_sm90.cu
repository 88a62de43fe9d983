// Probe (not part of the library, not built by CMake): what the harness's cache flush costs the first GEMM of a
// call, and whether an L2 eviction hint takes that cost off the critical path.
//
// The harness (and attnbwd_perf) flushes L2 by zero-filling 2 × L2 before every call, so the call starts with L2
// full of dirty lines; each line the call's first kernels allocate evicts one and writes it back. For gqa's dA =
// dY·Wo at small T (T × 5120 · 5120 × 4096, Wo 42 MB read once) that doubles the DRAM traffic of the launch.
// Marking Wo's reads evict-first (a stream access-policy window with the streaming property) should let Wo's lines
// replace each other instead of the dirty ones, leaving the write-back to a later kernel.
//
// Timed (events around the GEMM only, the flush untimed, median of 15), cuBLASLt's first heuristic answer:
//   Z     zero-fill flush (the harness's), then dA;
//   C     zero-fill flush, then a read of another 2 × L2 buffer (untimed: L2 full of clean lines), then dA;
//   ZW    Z with the stream's access-policy window over Wo (hit and miss property streaming);
//   ZWg   ZW captured in a CUDA graph (the window set on the stream while capturing), the graph launched;
//   chain dA then dWo = dYᵀ·A on the same stream (Z, and ZW for dA only): where the write-back goes;
//   rd    a plain int4 read of Wo (and with createpolicy evict_first + L2::cache_hint), after Z and after C.
// Build and run on the GPU machine:
//   nvcc -std=c++20 -O2 -arch=sm_90a -o l2probe perf/probes/l2_dirty_sm90.cu -lcublasLt && ./l2probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "lt_probe.cuh"

namespace {

template <bool Hint>
__global__ void read_kernel(const int4* __restrict__ p, std::size_t n, int* out) {
  int acc = 0;
  std::uint64_t pol = 0;
  if constexpr (Hint) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    int4 v;
    if constexpr (Hint) {
      asm volatile("ld.global.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p + i), "l"(pol));
    } else {
      v = p[i];
    }
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678) *out = acc;
}

struct Lt {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t first, second, out;
  cublasLtMatmulAlgo_t algo;
  const void *A, *B;
  void* C;
};

void* ws;
constexpr std::size_t kWs = 32u << 20;

// Row-major C[M][N] = op(A)·B as backends/cuda/lt_gemm.cu asks cuBLASLt (ta: A stored [K][M]).
Lt make(cublasLtHandle_t h, bool ta, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
        const void* A, const void* B, void* C) {
  Lt g{};
  g.h = h;
  CK(cublasLtMatrixLayoutCreate(&g.first, CUDA_R_16BF, N, K, ldb));
  CK(cublasLtMatrixLayoutCreate(&g.second, CUDA_R_16BF, ta ? M : K, ta ? K : M, lda));
  CK(cublasLtMatrixLayoutCreate(&g.out, CUDA_R_16BF, N, M, ldc));
  g.d = lt_desc(false, ta);
  cublasLtMatmulPreference_t pref = lt_pref(kWs);
  cublasLtMatmulHeuristicResult_t res[1];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(h, g.d, g.first, g.second, g.out, g.out, pref, 1, res, &found));
  if (!found) std::exit(2);
  g.algo = res[0].algo;
  g.A = A, g.B = B, g.C = C;
  return g;
}

void launch(const Lt& g, cudaStream_t s) {
  const float alpha = 1, beta = 0;
  CK(cublasLtMatmul(g.h, g.d, &alpha, g.B, g.first, g.A, g.second, &beta, g.C, g.out, g.C, g.out, &g.algo, ws, kWs,
                    s));
}

void window(cudaStream_t s, const void* p, std::size_t bytes) {
  cudaStreamAttrValue v{};
  v.accessPolicyWindow.base_ptr = const_cast<void*>(p);
  v.accessPolicyWindow.num_bytes = bytes;
  v.accessPolicyWindow.hitRatio = bytes ? 1.0f : 0.0f;
  v.accessPolicyWindow.hitProp = cudaAccessPropertyStreaming;
  v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
}

// Median (µs) of reps: prep() untimed, then f() between two events (lt_probe.cuh's timer).
float timed(cudaStream_t s, const std::function<void()>& prep, const std::function<void()>& f, int reps = 15) {
  return lt_time(s, prep, f, reps);
}

}  // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int l2 = 0, maxwin = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&maxwin, cudaDevAttrMaxAccessPolicyWindowSize, 0));
  std::printf("L2 %d bytes, max access-policy window %d bytes\n", l2, maxwin);
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(l2);
  void *fz, *fc;
  int* dummy;
  CK(cudaMalloc(&fz, flush_bytes));
  CK(cudaMalloc(&fc, flush_bytes));
  CK(cudaMemset(fc, 1, flush_bytes));
  CK(cudaMalloc(&dummy, 4));
  CK(cudaMalloc(&ws, kWs));
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const int64_t HS = 5120, QP = 4096, TMAX = 512;
  void *dY, *Wo, *dA, *Aat, *dWo;
  CK(cudaMalloc(&dY, TMAX * HS * 2));
  CK(cudaMalloc(&Wo, HS * QP * 2));
  CK(cudaMalloc(&dA, TMAX * QP * 2));
  CK(cudaMalloc(&Aat, TMAX * QP * 2));
  CK(cudaMalloc(&dWo, HS * QP * 2));
  for (auto [p, b] : {std::pair{dY, TMAX * HS * 2}, {Wo, HS * QP * 2}, {Aat, TMAX * QP * 2}})
    CK(cudaMemset(p, 0x3c, b));
  const std::size_t wo_bytes = HS * QP * 2;

  auto flushZ = [&] { CK(cudaMemsetAsync(fz, 0, flush_bytes, s)); };
  auto flushC = [&] {
    CK(cudaMemsetAsync(fz, 0, flush_bytes, s));
    read_kernel<false><<<1056, 256, 0, s>>>(static_cast<const int4*>(fc), flush_bytes / 16, dummy);
  };

  for (int64_t T : {128, 131, 256, 293, 512}) {
    Lt da = make(h, false, T, QP, HS, HS, QP, QP, dY, Wo, dA);
    Lt dwo = make(h, true, HS, QP, T, HS, QP, QP, dY, Aat, dWo);
    const float z = timed(s, flushZ, [&] { launch(da, s); });
    const float c = timed(s, flushC, [&] { launch(da, s); });
    window(s, Wo, wo_bytes);
    const float zw = timed(s, flushZ, [&] { launch(da, s); });
    // the same under stream capture: the window is on the stream while capturing
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch(da, s);
    CK(cudaStreamEndCapture(s, &g));
    window(s, nullptr, 0);
    CK(cudaGraphInstantiate(&ge, g, 0));
    const float zwg = timed(s, flushZ, [&] { CK(cudaGraphLaunch(ge, s)); });
    // the graph's kernel nodes: does the captured node carry the window?
    std::size_t nn = 0;
    CK(cudaGraphGetNodes(g, nullptr, &nn));
    std::vector<cudaGraphNode_t> nodes(nn);
    CK(cudaGraphGetNodes(g, nodes.data(), &nn));
    int with_window = 0, kernels = 0;
    for (cudaGraphNode_t n : nodes) {
      cudaGraphNodeType t;
      CK(cudaGraphNodeGetType(n, &t));
      if (t != cudaGraphNodeTypeKernel) continue;
      ++kernels;
      cudaKernelNodeAttrValue v{};
      if (cudaGraphKernelNodeGetAttribute(n, cudaKernelNodeAttributeAccessPolicyWindow, &v) == cudaSuccess &&
          v.accessPolicyWindow.num_bytes > 0)
        ++with_window;
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    // the graph without the window, for its own baseline
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch(da, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const float zg = timed(s, flushZ, [&] { CK(cudaGraphLaunch(ge, s)); });
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    // chains: dA then dWo on one stream
    const float chz = timed(s, flushZ, [&] {
      launch(da, s);
      launch(dwo, s);
    });
    const float chzw = timed(s, flushZ, [&] {
      window(s, Wo, wo_bytes);
      launch(da, s);
      window(s, nullptr, 0);
      launch(dwo, s);
    });
    const float dwoz = timed(s, flushZ, [&] { launch(dwo, s); });
    std::printf("T=%4ld dA: Z %6.2f  C %6.2f  ZW %6.2f  graph Z %6.2f  graph ZW %6.2f (%d/%d nodes carry the window) | "
                "dWo Z %6.2f | dA+dWo Z %6.2f  ZW(dA) %6.2f us\n",
                (long)T, z, c, zw, zg, zwg, with_window, kernels, dwoz, chz, chzw);
  }
  // plain reads of Wo
  const std::size_t n = wo_bytes / 16;
  auto rd = [&](bool hint) {
    if (hint)
      read_kernel<true><<<1056, 256, 0, s>>>(static_cast<const int4*>(Wo), n, dummy);
    else
      read_kernel<false><<<1056, 256, 0, s>>>(static_cast<const int4*>(Wo), n, dummy);
  };
  std::printf("read Wo (42 MB): Z plain %6.2f  Z evict_first %6.2f  C plain %6.2f  C evict_first %6.2f  ZW plain %6.2f us\n",
              timed(s, flushZ, [&] { rd(false); }), timed(s, flushZ, [&] { rd(true); }),
              timed(s, flushC, [&] { rd(false); }), timed(s, flushC, [&] { rd(true); }), [&] {
                window(s, Wo, wo_bytes);
                const float t = timed(s, flushZ, [&] { rd(false); });
                window(s, nullptr, 0);
                return t;
              }());
  CK(cudaDeviceSynchronize());
  return 0;
}
