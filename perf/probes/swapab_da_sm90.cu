// Probe (not part of the library, not built by CMake; written after the device time of the twenty-fifth session was
// spent, not yet run): can a swap-AB wgmma GEMM compute gqa's dA = dY·Wo at small T faster than cuBLASLt (21.5 µs at
// T = 131 on an H200 for 44 MB of traffic, 2.1 TB/s; no cuBLASLt configuration is faster, perf/NOTES.md)?
// T becomes wgmma's N: dAᵀ[n][t] = Σ_k Wo[k][n]·dY[t][k], A = Woᵀ read M-major from 128-byte-swizzled TMA boxes of Wo
// ([64 k][64 n], n contiguous), B = dY K-major (a [NT t][64 k] box, rows ≥ T read as zeros), N = NT = T rounded up
// to 8 (n136 at T = 131: 96 % of the products useful). CTA = (128 columns of n, one of R k-ranges): a producer thread
// streams the boxes through a ring of stages, two consumer warpgroups each hold a 64 × NT fp32 accumulator; each CTA
// writes its fp32 partial [range][n][t], and a second kernel sums the ranges in order and writes dA[t][n] in bf16
// (the library form would sum them in the slice's cluster, as linear_thin_sm90.cu does). Prints cuBLASLt's time, the
// probe's kernel, its sum and both (cold: a 256 MB write before every timed call), and the largest difference from
// cuBLASLt's dA.
//   nvcc -std=c++20 -O2 -arch=sm_90a -I. -Iperf/probes -o swapab perf/probes/swapab_da_sm90.cu -lcublasLt && ./swapab
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backends/cuda/sm90/ptx.cuh"
#include "lt_probe.cuh"

using namespace attnbwd::cuda::sm90;

namespace {

constexpr int kHS = 5120, kQP = 4096;  // dY [T][kHS], Wo [kHS][kQP], dA [T][kQP]
constexpr int kBN = 128, kBK = 64, kThreads = 384;

template <int NT>
struct Cfg {
  static_assert(NT % 8 == 0 && NT <= 256, "wgmma N");
  static constexpr int kW = 2 * 8192;      // two [64 k][64 n] boxes of Wo
  static constexpr int kY = NT * 128;      // one [NT t][64 k] box of dY
  static constexpr int kStage = kW + kY;   // a multiple of 1024 (NT % 8 == 0)
  static constexpr int kStages = (220 * 1024) / kStage < 6 ? (220 * 1024) / kStage : 6;
  static constexpr int kSmem = kStages * kStage + 1024 + 256;
  static_assert(kSmem <= 227 * 1024, "shared memory of one H100/H200 CTA");
  static_assert(NT == 136 || NT == 256, "wgmma forms generated: n136 and n256");
};

#if defined(ATTNBWD_SM90_DEVICE)
// D[64 x 136] (+)= A[64 x 16]·B[16 x 136], bf16 from shared memory, fp32 accumulators (68 per thread): A M-major
// (transposed), B K-major. accumulate = 0 overwrites D.
__device__ __forceinline__ void mma_m64n136_ta(float (&d)[68], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k16.f32.bf16.bf16\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67},\n"
      "%68, %69, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D[64 x 256] (+)= A[64 x 16]·B[16 x 256], bf16 from shared memory, fp32 accumulators (128 per thread): A M-major
// (transposed), B K-major. accumulate = 0 overwrites D.
__device__ __forceinline__ void mma_m64n256_ta(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},\n"
      "%128, %129, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}


template <int NT>
__device__ __forceinline__ void mma(float (&d)[NT / 2], std::uint64_t a, std::uint64_t b, int acc) {
  if constexpr (NT == 136) mma_m64n136_ta(d, a, b, acc);
  else mma_m64n256_ta(d, a, b, acc);
}
#endif

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    swapab_kernel(const __grid_constant__ CUtensorMap mW, const __grid_constant__ CUtensorMap mY, float* partial,
                  int kb_per_range) {
#if defined(ATTNBWD_SM90_DEVICE)
  using C = Cfg<NT>;
  extern __shared__ std::uint8_t raw[];
  std::uint8_t* sm = align_smem_1024(raw);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(sm + C::kStages * C::kStage);
  std::uint64_t* empty = full + C::kStages;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, range = static_cast<int>(blockIdx.y);
  const int kb0 = range * kb_per_range, tid = static_cast<int>(threadIdx.x), wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);  // one arrival per consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {  // producer: one thread issues every copy
    if (tid == 0) {
      for (int i = 0; i < kb_per_range; ++i) {
        const int s = i % C::kStages;
        if (i >= C::kStages) mbar_wait(&empty[s], ((i / C::kStages) - 1) & 1);
        std::uint8_t* st = sm + s * C::kStage;
        mbar_arrive_expect_tx(&full[s], C::kStage);
        const int k = (kb0 + i) * kBK;
        tma_load_2d(st, &mW, &full[s], n0, k);
        tma_load_2d(st + 8192, &mW, &full[s], n0 + 64, k);
        tma_load_2d(st + C::kW, &mY, &full[s], k, 0);
      }
    }
    return;
  }
  const int half = wg - 1, t = tid - 128 * wg;  // consumer warpgroup: rows n0 + 64·half .. + 63 of dAᵀ
  float d[NT / 2];
#pragma unroll
  for (int r = 0; r < NT / 2; ++r) d[r] = 0.0f;
  for (int i = 0; i < kb_per_range; ++i) {
    const int s = i % C::kStages;
    mbar_wait(&full[s], (i / C::kStages) & 1);
    const std::uint32_t st = smem_addr(sm + s * C::kStage);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      mma<NT>(d, smem_desc(st + half * 8192 + 2048 * kk, 8192, 1024), smem_desc(st + C::kW + 32 * kk, 16, 1024),
              i > 0 || kk > 0);
    wgmma_commit();
    wgmma_wait<1>();  // k-block i − 1's products are done: its stage may be refilled
    if (i > 0 && t == 0) mbar_arrive(&empty[(i - 1) % C::kStages]);
  }
  wgmma_wait<0>();
  fence_regs(d);
  // Fragment (m64nNT C layout): row 16·warp + lane/4 (+ 8), column 8·j + 2·(lane % 4) (+ 1).
  const int w = t / 32, l = t % 32;
  float* out = partial + (static_cast<std::size_t>(range) * kQP + n0 + 64 * half) * NT;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = 16 * w + l / 4 + 8 * h, col = 8 * j + 2 * (l % 4);
      *reinterpret_cast<float2*>(out + static_cast<std::size_t>(m) * NT + col) =
          make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    }
#endif
}

// dA[t][n] = bf16(Σ_r partial[r][n][t]) in range order, through a 32 × 32 transpose in shared memory.
template <int NT>
__global__ void reduce_kernel(const float* partial, __nv_bfloat16* dA, int T, int ranges) {
  __shared__ float tile[32][33];
  const int n0 = static_cast<int>(blockIdx.x) * 32, t0 = static_cast<int>(blockIdx.y) * 32;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int y = ty; y < 32; y += 8) {
    const int n = n0 + y, tt = t0 + tx;
    float s = 0.0f;
    if (tt < NT)
      for (int r = 0; r < ranges; ++r) s += partial[(static_cast<std::size_t>(r) * kQP + n) * NT + tt];
    tile[y][tx] = s;
  }
  __syncthreads();
  for (int y = ty; y < 32; y += 8) {
    const int tt = t0 + y, n = n0 + tx;
    if (tt < T) dA[static_cast<std::size_t>(tt) * kQP + n] = __float2bfloat16_rn(tile[tx][y]);
  }
}

__global__ void fill(__nv_bfloat16* p, std::size_t n, std::uint32_t seed, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
    p[i] = __float2bfloat16_rn(scale * (static_cast<float>(x & 0xFFFF) / 32768.0f - 1.0f));
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !f) {
    printf("no cuTensorMapEncodeTiled\n");
    exit(1);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
}

// A 2-D bf16 tensor [rows][cols] (cols contiguous) with boxes [box_rows][box_cols], 128-byte swizzle, zeros outside.
CUtensorMap map2(const void* base, int rows, int cols, int box_rows, int box_cols) {
  CUtensorMap m{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  CK(encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, estr,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}

float bf(const __nv_bfloat16& x) { return __bfloat162float(x); }

template <int NT>
void probe(int T, cublasLtHandle_t lt, void* ws, void* flush, std::size_t flush_bytes, const __nv_bfloat16* dY,
           const __nv_bfloat16* Wo, __nv_bfloat16* ref, __nv_bfloat16* dA, float* partial) {
  cudaStream_t s = 0;
  // cuBLASLt's first heuristic answer, as lt_gemm.cu calls it (row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ).
  cublasLtMatrixLayout_t first, second, out;
  CK(cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, kQP, kHS, kQP));
  CK(cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, kHS, T, kHS));
  CK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, kQP, T, kQP));
  cublasLtMatmulDesc_t desc = lt_desc(false, false);
  cublasLtMatmulPreference_t pref = lt_pref(32u << 20);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, first, second, out, out, pref, 1, &res, &found));
  if (found == 0) {
    printf("cuBLASLt offers no algorithm\n");
    exit(1);
  }
  const float alpha = 1, beta = 0;
  auto lt_run = [&] {
    CK(cublasLtMatmul(lt, desc, &alpha, Wo, first, dY, second, &beta, ref, out, ref, out, &res.algo, ws, 32u << 20, s));
  };
  const float lt_us = lt_time_cold(s, flush, flush_bytes, lt_run, 7);
  const double mb = 2.0 * (double(T) * kHS + double(kHS) * kQP + double(T) * kQP) / 1e6;
  printf("T = %d (N = %d): cuBLASLt %.2f us (%.0f GB/s of %.1f MB)\n", T, NT, lt_us, mb / lt_us * 1e3, mb);
  const CUtensorMap mW = map2(Wo, kHS, kQP, kBK, 64), mY = map2(dY, T, kHS, NT, kBK);
  using C = Cfg<NT>;
  CK(cudaFuncSetAttribute(swapab_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  std::vector<__nv_bfloat16> a(static_cast<std::size_t>(T) * kQP), b(a.size());
  CK(cudaMemcpy(a.data(), ref, a.size() * 2, cudaMemcpyDeviceToHost));
  for (int R : {2, 4, 5, 8}) {
    if ((kHS / kBK) % R != 0) continue;  // every range the same number of k-blocks
    const int kb = kHS / kBK / R;
    const dim3 grid(kQP / kBN, R), rgrid(kQP / 32, (T + 31) / 32), rblock(32, 8);
    auto kern = [&] { swapab_kernel<NT><<<grid, kThreads, C::kSmem, s>>>(mW, mY, partial, kb); };
    auto red = [&] { reduce_kernel<NT><<<rgrid, rblock, 0, s>>>(partial, dA, T, R); };
    CK(cudaMemset(dA, 0xFF, a.size() * 2));
    kern();
    red();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(b.data(), dA, b.size() * 2, cudaMemcpyDeviceToHost));
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double x = bf(a[i]), y = bf(b[i]);
      scale = std::fmax(scale, std::fabs(x));
      worst = std::isfinite(y) ? std::fmax(worst, std::fabs(x - y)) : INFINITY;
    }
    const float k_us = lt_time_cold(s, flush, flush_bytes, kern, 7);
    const float r_us = lt_time_cold(s, flush, flush_bytes, red, 7);
    const float both = lt_time_cold(s, flush, flush_bytes, [&] { kern(); red(); }, 7);
    printf("   R = %d (%d CTAs, %d stages): kernel %.2f us (%.0f GB/s), sum %.2f, both %.2f us (%.2fx cuBLASLt); "
           "max |diff| %.3g of max |dA| %.3g\n",
           R, grid.x * grid.y, C::kStages, k_us, mb / k_us * 1e3, r_us, both, lt_us / both, worst, scale);
  }
  lt_release(pref, desc, {first, second, out});
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  void *ws, *flush;
  const std::size_t kFlush = 256u << 20;
  lt_probe_setup(&lt, &ws, 32u << 20, &flush, kFlush);
  const int TMAX = 256;
  __nv_bfloat16 *dY, *Wo, *ref, *dA;
  float* partial;
  CK(cudaMalloc(&dY, std::size_t(TMAX) * kHS * 2));
  CK(cudaMalloc(&Wo, std::size_t(kHS) * kQP * 2));
  CK(cudaMalloc(&ref, std::size_t(TMAX) * kQP * 2));
  CK(cudaMalloc(&dA, std::size_t(TMAX) * kQP * 2));
  CK(cudaMalloc(&partial, std::size_t(8) * kQP * TMAX * 4));
  fill<<<1024, 256>>>(dY, std::size_t(TMAX) * kHS, 17u, 1.0f);
  fill<<<1024, 256>>>(Wo, std::size_t(kHS) * kQP, 29u, 0.02f);
  CK(cudaDeviceSynchronize());
  probe<136>(131, lt, ws, flush, kFlush, dY, Wo, ref, dA, partial);
  probe<136>(128, lt, ws, flush, kFlush, dY, Wo, ref, dA, partial);
  probe<256>(256, lt, ws, flush, kFlush, dY, Wo, ref, dA, partial);
  return 0;
}
