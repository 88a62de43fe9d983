// The small-K weight gradient of wgrad_small_k_sm90.hpp on sm_90a.
//
// CTA (slice s, range r): columns n0 = BN·s .. n0 + BN - 1 of C, and a range of its 64-row blocks. Warpgroup 0's first
// thread loads B's slice [K][BN] once (NKB k-blocks of 64 rows, each as BN / 64 boxes of 64 × 64) and then streams,
// per row block, A's tile [K][64] (NKB boxes {64 m, 64 k}, read M-major) through a ring of kStages slots; rows ≥ K
// of both read as zeros. Consumer warpgroups 1 and 2 take the row blocks in turn (block j to warpgroup 1 + j % 2), each
// product a wgmma m64nBNk16 with A M-major and B N-major from shared memory, then round their 64 × BN block to bf16
// into their own staging (64-column boxes, 128-byte swizzle) and store it by TMA, so one warpgroup's epilogue runs
// under the other's products. Each output is one fp32 sum over the K tokens in k order, rounded once.
#include "wgrad_small_k_sm90.hpp"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "linear_backward_sm90.hpp"
#include "sm90/ptx.cuh"
#include "sm90/stage.cuh"

namespace attnbwd::cuda::sm90 {
namespace {

constexpr int kThreads = 384, kBox = 64 * 64 * 2, kStages = 4;

// BN: the slice's columns (256 or 128); NKB: K's 64-row blocks (1..4).
template <int BN, int NKB>
struct Cfg {
  static_assert((BN == 256 && NKB <= 2) || (BN == 128 && NKB <= 4), "shared memory of one CTA");
  static constexpr int kChunks = BN / 64;              // 64-column boxes of a row of the slice
  static constexpr int kBBytes = NKB * kChunks * kBox;  // B's slice, resident
  static constexpr int kABytes = NKB * kBox;            // one ring slot: A's tile of one row block
  static constexpr int kStgBytes = kChunks * kBox;      // one consumer warpgroup's staging
  static constexpr int kSmem = kBBytes + kStages * kABytes + 2 * kStgBytes + 1024 /*align*/ + 256 /*barriers*/;
  static_assert(kSmem <= 227 * 1024, "shared memory of one H100/H200 CTA");
};

struct Params {
  int slices, per;  // BN-column slices of C; row blocks per range
  int mblocks;      // C's 64-row blocks
};

#if defined(ATTNBWD_SM90_DEVICE)

template <int BN, int NKB>
__global__ void __launch_bounds__(kThreads, 1)
    wgrad_small_k_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                         const __grid_constant__ CUtensorMap map_c, const __grid_constant__ Params p) {
  using C = Cfg<BN, NKB>;
  constexpr int R = BN / 2;  // accumulators per thread
  extern __shared__ std::uint8_t smem_raw[];
  std::uint8_t* base = align_smem_1024(smem_raw);
  std::uint8_t* sb = base;                      // B's slice: box (kb, c) at (kb·kChunks + c)·kBox
  std::uint8_t* sa = sb + C::kBBytes;           // ring slot s at s·kABytes: box kb at kb·kBox
  std::uint8_t* stg = sa + kStages * C::kABytes;  // staging of consumer warpgroup ci at ci·kStgBytes
  auto* bars = reinterpret_cast<std::uint64_t*>(stg + 2 * C::kStgBytes);
  std::uint64_t* b_full = bars;
  std::uint64_t* full = bars + 1;
  std::uint64_t* empty = full + kStages;

  const int slice = static_cast<int>(blockIdx.x) % p.slices, range = static_cast<int>(blockIdx.x) / p.slices;
  const int n0 = slice * BN;
  const int mb0 = range * p.per, mb1 = min(p.mblocks, mb0 + p.per);
  const int count = max(0, mb1 - mb0);

  if (threadIdx.x == 0) {
    mbar_init(b_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 1);  // the one consumer warpgroup of the slot's row block
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    mbar_arrive_expect_tx(b_full, C::kBBytes);
#pragma unroll
    for (int kb = 0; kb < NKB; ++kb)
#pragma unroll
      for (int c = 0; c < C::kChunks; ++c)
        tma_load_2d(sb + (kb * C::kChunks + c) * kBox, &map_b, b_full, n0 + 64 * c, 64 * kb);
    int stage = 0;
    std::uint32_t phase = 0;
    for (int j = 0; j < count; ++j) {
      mbar_wait(&empty[stage], phase ^ 1);
      std::uint8_t* slot = sa + stage * C::kABytes;
      mbar_arrive_expect_tx(&full[stage], C::kABytes);
#pragma unroll
      for (int kb = 0; kb < NKB; ++kb) tma_load_2d(slot + kb * kBox, &map_a, &full[stage], 64 * (mb0 + j), 64 * kb);
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int ci = threadIdx.x / 128 - 1;
  const bool leader = threadIdx.x % 128 == 0;
  std::uint8_t* my_stg = stg + ci * C::kStgBytes;
  float acc[R];
  mbar_wait(b_full, 0);
  const std::uint32_t b_addr = smem_addr(sb);
  for (int j = ci; j < count; j += 2) {
    const int stage = j % kStages;
    mbar_wait(&full[stage], (j / kStages) & 1);
    const std::uint32_t a_addr = smem_addr(sa + stage * C::kABytes);
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4 * NKB; ++s) {  // every 16-row step of the k-blocks (rows ≥ K are zeros)
      const int kb = s / 4, kk = s % 4;
      const std::uint64_t da = smem_desc(a_addr + kb * kBox + 2048 * kk, kBox, 1024);
      const std::uint64_t db = smem_desc(b_addr + kb * C::kChunks * kBox + 2048 * kk, kBox, 1024);
      if constexpr (BN == 256)
        wgmma_m64n256k16_bf16<1, 1>(acc, da, db, s > 0);
      else
        wgmma_m64n128k16_bf16<1>(acc, da, db, s > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
    if (leader) {
      mbar_arrive(&empty[stage]);
      bulk_wait_read<0>();  // this warpgroup's last stores have read its staging
    }
    named_barrier(1 + ci, 128);
    stage_chunk<0, R>(acc, my_stg);
    stage_chunk<1, R>(acc, my_stg + kBox);
    if constexpr (BN == 256) {
      stage_chunk<2, R>(acc, my_stg + 2 * kBox);
      stage_chunk<3, R>(acc, my_stg + 3 * kBox);
    }
    fence_proxy_async_smem();
    named_barrier(1 + ci, 128);
    if (leader) {
      const int m0 = 64 * (mb0 + j);
#pragma unroll
      for (int q = 0; q < C::kChunks; ++q) tma_store_2d(&map_c, my_stg + q * kBox, n0 + 64 * q, m0);
      bulk_commit();
    }
  }
  if (leader) bulk_wait<0>();
}

#else  // not the sm_90a pass: the host never launches this kernel on other archs

template <int BN, int NKB>
__global__ void __launch_bounds__(kThreads, 1)
    wgrad_small_k_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                         const __grid_constant__ CUtensorMap, const __grid_constant__ Params) {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}

#endif

int slice_cols(std::int64_t K) { return K <= 128 ? 256 : 128; }

template <int BN, int NKB>
void launch(const SmallKWgrad& g, int grid, cudaStream_t stream) {
  using C = Cfg<BN, NKB>;
  allow_smem(reinterpret_cast<const void*>(wgrad_small_k_kernel<BN, NKB>), C::kSmem);
  // A [K][M] and B [K][N] as row-major matrices in 64 × 64 boxes (rows ≥ K read as zeros), C [M][N] likewise.
  const CUtensorMap map_a = tensor_map(g.a, g.K, g.M, g.lda, 64, 64);
  const CUtensorMap map_b = tensor_map(g.b, g.K, g.N, g.ldb, 64, 64);
  const CUtensorMap map_c = tensor_map(g.c, g.M, g.N, g.N, 64, 64);
  Params p;
  p.slices = static_cast<int>(g.N / BN), p.mblocks = static_cast<int>(g.M / 64);
  const int ranges = grid / p.slices;
  p.per = (p.mblocks + ranges - 1) / ranges;
  wgrad_small_k_kernel<BN, NKB><<<grid, kThreads, C::kSmem, stream>>>(map_a, map_b, map_c, p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

bool overlaps(const void* p, std::int64_t p_bytes, const void* q, std::int64_t q_bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
  return a < b + static_cast<std::uintptr_t>(q_bytes) && b < a + static_cast<std::uintptr_t>(p_bytes);
}

}  // namespace

std::string small_k_wgrad_unsupported(const SmallKWgrad& g) {
  if (g.K < 1 || g.K > 256) return "K (tokens) not in 1..256";
  if (g.M < 64 || g.M % 64 != 0 || g.N < 128 || g.N % 128 != 0) return "M not a multiple of 64 or N of 128";
  if (g.M > (1 << 24) || g.N > (1 << 24)) return "M or N beyond the kernel's range";
  if (g.lda < g.M || g.ldb < g.N || g.lda % 8 != 0 || g.ldb % 8 != 0)
    return "row strides of A or B shorter than a row or not multiples of 16 bytes (TMA)";
  if (!aligned16(g.a) || !aligned16(g.b) || !aligned16(g.c)) return "A, B or C not 16-byte aligned (TMA)";
  const std::int64_t c_bytes = g.M * g.N * 2;
  if (overlaps(g.c, c_bytes, g.a, ((g.K - 1) * g.lda + g.M) * 2) ||
      overlaps(g.c, c_bytes, g.b, ((g.K - 1) * g.ldb + g.N) * 2))
    return "C overlaps A or B";
  return {};
}

int small_k_wgrad_grid(const SmallKWgrad& g, int ctas_target) {
  const int slices = static_cast<int>(g.N / slice_cols(g.K));
  const int mblocks = static_cast<int>(g.M / 64);
  const int ranges = std::max(1, std::min(mblocks, ctas_target / slices));
  return slices * ranges;
}

void small_k_wgrad_launch(const SmallKWgrad& g, int ctas_target, cudaStream_t stream) {
  if (const std::string why = small_k_wgrad_unsupported(g); !why.empty()) throw Error("small_k_wgrad", why);
  int dev = 0, major = 0, minor = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  ATTNBWD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  ATTNBWD_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) throw Error("small_k_wgrad", "an sm_90a kernel, and this device is not sm_90");
  const int grid = small_k_wgrad_grid(g, ctas_target);
  const int nkb = static_cast<int>((g.K + 63) / 64);
  switch (nkb) {
    case 1: launch<256, 1>(g, grid, stream); break;
    case 2: launch<256, 2>(g, grid, stream); break;
    case 3: launch<128, 3>(g, grid, stream); break;
    default: launch<128, 4>(g, grid, stream);
  }
}

}  // namespace attnbwd::cuda::sm90
