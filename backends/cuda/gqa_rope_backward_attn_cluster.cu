// gqa_rope_backward, steps 3-5 in one launch for short sequences (S ≤ 512; ATTNBWD_CUDA_GQA_ATTN=cluster; see
// gqa_rope_backward_attn.hpp). At small S the attention section is a chain of six or seven launches of a few
// µs each (dO copy, dP, softmax rows, dV, dK, dQ: ~25-45 µs at S = 128-293 on an H200) around ~10 MB of data;
// this kernel does all of it in one.
//
// One thread-block cluster per (b, h) of n = ceil(S / 64) CTAs (n ≤ 8, the portable cluster size); CTA i of
// the cluster owns query block i and key block i (64 each) and runs 8 warps of mma.sync m16n8k16 (bf16 in,
// fp32 accumulate: valid on sm_90 and sm_100). Its tiles (V, then K, dO, Q, 64 rows × 128 at a time) stream
// through a ring of three shared-memory slots by cp.async, two ahead of use.
//  Phase 1 (query block i, all keys): P_i's rows are stored transposed (Pᵀ: [keys][queries]); dP = bf16(dO_i·Vᵀ)
//   (dO_i as register A fragments) is stored transposed beside it; r = Σ_keys P·dP (fp32, a fixed order);
//   dSᵀ = bf16(bf16(P⊙(dP − r))·scaling) in place (the reference's rounding points and r); then
//   dQ_i = bf16(dS_i·K), stored.
//  Phase 2 (key block j = i, all queries), after a cluster barrier: for each query block i' in order, the A
//   fragments of P_i'[:, j]ᵀ (then dS_i'[:, j]ᵀ) are read straight from CTA i''s shared memory (distributed
//   shared memory; rows of the transposed blocks are keys) and dV_j += Pᵀ·dO_i' (then dK_j += dSᵀ·Q_i') in fp32;
//   rounded once and stored.
// P is read once, dP and dS never leave the chip. Tails: rows and keys past S are zero in every tile (so they add
// nothing) and are never stored. Deterministic: no atomics, every sum in a fixed order.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "check.hpp"
#include "gqa_rope_backward_attn.hpp"

namespace attnbwd::cuda {
namespace {

using std::int64_t;
using std::uint32_t;
using bf = __nv_bfloat16;

constexpr int kD = 128;                          // head_dim
constexpr int kBlk = 64;                         // queries (phase 1) and keys (phase 2) per CTA
constexpr int kThreads = 256;                    // 8 warps: 4 row groups of 16 × 2 column halves
constexpr int kMaxCluster = 8;                   // portable cluster size: S ≤ 512
constexpr int kTileLd = kD + 8;                  // [64][136] tiles of V, K, dO, Q rows (conflict-free ldmatrix)
constexpr int kTileBytes = kBlk * kTileLd * 2;   // 17,408
constexpr int kBlockLd = kBlk + 8;               // [64][72] blocks of dS or P (phase 2)
constexpr int kBlockBytes = kBlk * kBlockLd * 2;  // 9,216
constexpr int kPairBytes = kBlockBytes + kTileBytes;
constexpr int kRing = 3;                         // tiles in flight: the one in use and the next two

// Row stride (elements) of the CTA's [64][64·n] dS rows: 64·n + 8 (8 consecutive rows in 8 bank groups).
__host__ __device__ constexpr int rows_ld(int n) { return kBlk * n + 8; }
// Phase 1: dS rows and a ring of [64][136] tiles; phase 2 (same memory): a ring of (block, tile) pairs; then r's two
// halves. Up to n = 7 (S ≤ 448) two CTAs fit on an H200 SM.
__host__ __device__ constexpr std::size_t smem_bytes(int n) {
  const std::size_t p1 = static_cast<std::size_t>(kBlk) * rows_ld(n) * 2 + static_cast<std::size_t>(kRing) * kTileBytes;
  const std::size_t p2 = static_cast<std::size_t>(kRing) * kPairBytes;
  return (p1 > p2 ? p1 : p2) + 2u * kBlk * sizeof(float);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ float f32(bf x) { return __bfloat162float(x); }
__device__ __forceinline__ float r16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 16 bytes global -> shared, asynchronously; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// Issues the copies of rows row0 + r (r < 64; r < valid, else zeros) of `cols` bf16 (a multiple of 8) at src + (row0 +
// r)·ld into dst rows of dst_ld elements.
template <int Cols>
__device__ __forceinline__ void issue_rows(bf* dst, int dst_ld, const bf* __restrict__ src, int64_t ld, int row0,
                                           int valid) {
#pragma unroll
  for (int k = 0; k < kBlk * (Cols / 8) / kThreads; ++k) {
    const int idx = k * kThreads + threadIdx.x, r = idx / (Cols / 8), c = idx % (Cols / 8);
    const bool ok = r < valid;
    cp16(dst + r * dst_ld + c * 8, src + (ok ? (row0 + r) * ld + c * 8 : 0), ok);
  }
}

// Adds A·B for this warp's 16 rows × 64 columns (acc[8][4]) over one 64-deep k-block: A fragments `a[ks]` (k =
// 16·ks..), B from a [64 k][136] tile (rows = k, columns dh..dh+63) by ldmatrix.trans.
__device__ __forceinline__ void mma_k64(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf* tile, int dh,
                                        int lane) {
#pragma unroll
  for (int ks = 0; ks < kBlk / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bb[4];
      ldsm4t(bb, smem_u32(tile + (ks * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * kTileLd + dh + 16 * np + 8 * (lane / 16)));
      mma(acc[2 * np], a[ks], bb[0], bb[1]);
      mma(acc[2 * np + 1], a[ks], bb[2], bb[3]);
    }
  }
}

// Stores this warp's 16 × 64 fp32 block (acc[8][4]) as bf16 rows rg + g (+8) < valid of a [.., 128] tensor.
__device__ __forceinline__ void store_rows(bf* out, const float (&acc)[8][4], int rg, int dh, int valid, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = rg + g + 8 * half;
    if (row >= valid) continue;
    bf* o = out + static_cast<int64_t>(row) * kD + dh + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<__nv_bfloat162*>(o + 8 * j) = __floats2bfloat162_rn(acc[j][2 * half], acc[j][2 * half + 1]);
  }
}

__device__ __forceinline__ void zero(float (&acc)[8][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

__global__ void __launch_bounds__(kThreads, 2) gqa_cluster_attn_kernel(const GqaClusterAttn p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int S = static_cast<int>(p.S);
  const int n = (S + kBlk - 1) / kBlk, keys = kBlk * n, ld = rows_ld(n);
  const int rank = static_cast<int>(cluster_rank());  // query block (phase 1) and key block (phase 2)
  const int64_t bh = blockIdx.x / n, b = bh / p.H, h = bh % p.H;
  bf* sS = reinterpret_cast<bf*>(smem);  // phase 1: [64][ld] dP, then dS, of query block `rank`
  bf* ring1 = sS + kBlk * ld;            //          kRing × [64][136]
  unsigned char* ring2 = smem;           // phase 2: kRing × ([64][72] block, [64][136] tile)
  float* sR = reinterpret_cast<float*>(smem + smem_bytes(n) - 2 * kBlk * sizeof(float));  // [2][64]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = 16 * (warp % 4);  // this warp's 16 rows of every 64-row product
  const int dh = 64 * (warp / 4);  // its 64 head_dim columns (dQ, dV, dK)
  const int q0 = rank * kBlk, qn = min(kBlk, S - q0);
  const bf* dO = p.dO + b * p.do_b + h * p.do_h;
  const bf* Qh = p.Q + bh * S * kD;
  const bf* Kh = p.K + bh * S * kD;
  const bf* Vh = p.V + bh * S * kD;
  const bf* Ph = p.P + bh * S * static_cast<int64_t>(S);
  bf* dSg = p.dS + bh * S * static_cast<int64_t>(keys);  // [S][keys]: dS of the head (phase 2's source)
  bf* Pg = p.Pp + bh * S * static_cast<int64_t>(keys);   // [S][keys]: P padded (S % 8 != 0 only)

  // ---- phase 1: dP, r, dS and dQ of query block `rank` ----
  // Tile s of phase 1 (s < n: V keys 64s..; n ≤ s < 2n: K keys 64(s − n)..) in ring1 slot s % 3, issued two steps
  // ahead; one commit group per step (possibly empty).
  const auto slot1 = [&](int s) { return ring1 + (s % kRing) * kBlk * kTileLd; };
  const auto issue1 = [&](int s) {
    if (s < 2 * n) {
      const int r0 = (s < n ? s : s - n) * kBlk;
      issue_rows<kD>(slot1(s), kTileLd, s < n ? Vh : Kh, kD, r0, min(kBlk, S - r0));
    }
    cp_commit();
  };
  // dO rows of the block into slot 2 (read as A fragments before tile 2 lands there), V's first two tiles.
  issue_rows<kD>(slot1(2), kTileLd, dO, p.do_ld, q0, qn);
  cp_commit();
  issue1(0);
  issue1(1);
  cp_wait<2>();  // dO's rows
  __syncthreads();
  uint32_t a[kD / 16][4];  // dO rows rg.. of this warp as A fragments (k = head_dim)
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
    ldsm4(a[ks], smem_u32(slot1(2) + (rg + lane % 8 + 8 * ((lane / 8) % 2)) * kTileLd + ks * 16 + 8 * (lane / 16)));
  __syncthreads();  // slot 2 is free for tile 2

  const int kh = 32 * (warp / 4);  // this warp's 32 keys of each 64-key tile (dP, dS)
  // P at this thread's accumulator positions of key tile s (rows rg + g (+8), keys s·64 + kh + 8j + 2t, +1), straight
  // from global memory (zeros past S): pairs by 4-byte loads where every row is 4-byte aligned, else by elements.
  const bf zero_bf = __float2bfloat16_rn(0.0f);
  const auto load_p = [&](int s, __nv_bfloat162 (&pp)[4][2]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = s * kBlk + kh + 8 * j + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = rg + g + 8 * half;
        const bf* src = Ph + static_cast<int64_t>(q0 + row) * S + col;
        if (row >= qn || col >= S) {
          pp[j][half] = __halves2bfloat162(zero_bf, zero_bf);
        } else if (p.p_even) {
          pp[j][half] = *reinterpret_cast<const __nv_bfloat162*>(src);
        } else {
          pp[j][half] = __halves2bfloat162(src[0], col + 1 < S ? src[1] : zero_bf);
        }
      }
    }
  };
  float rp[2] = {0.0f, 0.0f};
  for (int s = 0; s < n; ++s) {  // dP = bf16(dO·Vᵀ) for key tile s, and r's partial sums
    issue1(s + 2);
    __nv_bfloat162 pp[4][2];
    load_p(s, pp);
    cp_wait<2>();
    __syncthreads();
    const bf* vt = slot1(s);
    float acc[4][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bb[4];
        ldsm4(bb, smem_u32(vt + (kh + 16 * np + lane % 8 + 8 * (lane / 16)) * kTileLd + ks * 16 + 8 * ((lane / 8) % 2)));
        mma(acc[2 * np], a[ks], bb[0], bb[1]);
        mma(acc[2 * np + 1], a[ks], bb[2], bb[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = s * kBlk + kh + 8 * j + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = rg + g + 8 * half;
        const __nv_bfloat162 d = __floats2bfloat162_rn(acc[j][2 * half], acc[j][2 * half + 1]);
        *reinterpret_cast<__nv_bfloat162*>(sS + row * ld + col) = d;
        rp[half] += f32(pp[j][half].x) * f32(d.x);
        rp[half] += f32(pp[j][half].y) * f32(d.y);
        // P's padded copy for phase 2 where P's own rows are not 16-byte aligned
        if (!p.p_vec16 && row < qn) *reinterpret_cast<__nv_bfloat162*>(Pg + static_cast<int64_t>(q0 + row) * keys + col) = pp[j][half];
      }
    }
    __syncthreads();
  }
  // r per row: the 4 lanes of a row, then the two key halves (warps w and w + 4), in a fixed order.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    rp[half] += __shfl_xor_sync(0xffffffffu, rp[half], 1);
    rp[half] += __shfl_xor_sync(0xffffffffu, rp[half], 2);
    if (t == 0) sR[(warp / 4) * kBlk + rg + g + 8 * half] = rp[half];
  }
  __syncthreads();
  {
    // dS = bf16(bf16(P⊙(dP − r))·scaling) at the same positions (P read again), in place and into the head's dS
    // rows in global memory (rows < S; keys ≥ S: P = 0, so dS = 0 there).
    float r[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) r[half] = sR[rg + g + 8 * half] + sR[kBlk + rg + g + 8 * half];
    __nv_bfloat162 pp[4][2];
    load_p(0, pp);
    for (int s = 0; s < n; ++s) {
      __nv_bfloat162 pn[4][2];
      if (s + 1 < n) load_p(s + 1, pn);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = s * kBlk + kh + 8 * j + 2 * t;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = rg + g + 8 * half;
          __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(sS + row * ld + col);
          const __nv_bfloat162 dp = *d;
          const float s0 = r16(r16(f32(pp[j][half].x) * (f32(dp.x) - r[half])) * p.scaling);
          const float s1 = r16(r16(f32(pp[j][half].y) * (f32(dp.y) - r[half])) * p.scaling);
          const __nv_bfloat162 ds = __floats2bfloat162_rn(s0, s1);
          *d = ds;
          if (row < qn) *reinterpret_cast<__nv_bfloat162*>(dSg + static_cast<int64_t>(q0 + row) * keys + col) = ds;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) pp[j][0] = pn[j][0], pp[j][1] = pn[j][1];
    }
  }
  __syncthreads();
  cluster_arrive();  // this CTA's dS rows (and P's padded rows) are in global memory (release)

  // dQ = dS·K: A = dS rows rg.. (ldmatrix), K tile s − n.
  float acc[8][4] = {};
  for (int s = n; s < 2 * n; ++s) {
    issue1(s + 2);
    cp_wait<2>();
    __syncthreads();
    const int k0 = (s - n) * kBlk;
    uint32_t af[4][4];
#pragma unroll
    for (int ks = 0; ks < kBlk / 16; ++ks)
      ldsm4(af[ks], smem_u32(sS + (rg + lane % 8 + 8 * ((lane / 8) % 2)) * ld + k0 + ks * 16 + 8 * (lane / 16)));
    mma_k64(acc, af, slot1(s), dh, lane);
    __syncthreads();
  }
  store_rows(p.dQ + (bh * S + q0) * kD, acc, rg, dh, qn, lane);
  zero(acc);

  // ---- phase 2: dV, then dK, of key block `rank`, over the query blocks i in order ----
  // Step s (2n ≤ s < 3n: dV, i = s − 2n; 3n ≤ s < 4n: dK, i = s − 3n): the 64×64 block (queries of block i, this
  // CTA's keys) of P or dS, and the rows of block i of dO or Q, in ring2 slot s % 3.
  cluster_wait();  // every CTA's dS rows are in global memory (acquire)
  const bool p_direct = p.p_vec16;
  const auto slot2 = [&](int s) { return ring2 + (s % kRing) * kPairBytes; };
  const auto issue2 = [&](int s) {
    if (s < 4 * n) {
      const bool dk = s >= 3 * n;
      const int i = dk ? s - 3 * n : s - 2 * n, r0 = i * kBlk, valid = min(kBlk, S - r0);
      bf* blk = reinterpret_cast<bf*>(slot2(s));
      bf* tile = reinterpret_cast<bf*>(slot2(s) + kBlockBytes);
      if (dk || !p_direct)
        issue_rows<kBlk>(blk, kBlockLd, (dk ? dSg : Pg) + q0, keys, r0, valid);
      else  // P itself (S % 8 == 0): keys past S are not there (64-key blocks of a padded head); zero chunks
#pragma unroll
        for (int k = 0; k < kBlk * (kBlk / 8) / kThreads; ++k) {
          const int idx = k * kThreads + threadIdx.x, r = idx / (kBlk / 8), c = idx % (kBlk / 8);
          const bool ok = r < valid && q0 + 8 * c < S;
          cp16(blk + r * kBlockLd + c * 8, Ph + (ok ? (r0 + r) * static_cast<int64_t>(S) + q0 + 8 * c : 0), ok);
        }
      issue_rows<kD>(tile, kTileLd, dk ? Qh : dO, dk ? kD : p.do_ld, r0, valid);
    }
    cp_commit();
  };
  issue2(2 * n);
  issue2(2 * n + 1);
  for (int s = 2 * n; s < 4 * n; ++s) {
    if (s == 3 * n) {  // dV done
      store_rows(p.dV + (bh * S + q0) * kD, acc, rg, dh, qn, lane);
      zero(acc);
    }
    issue2(s + 2);
    cp_wait<2>();
    __syncthreads();
    const bf* blk = reinterpret_cast<const bf*>(slot2(s));
    // A = blockᵀ: rows = keys rg.., k = queries; the block is stored [query][key]: ldmatrix.trans.
    uint32_t af[4][4];
#pragma unroll
    for (int ks = 0; ks < kBlk / 16; ++ks)
      ldsm4t(af[ks], smem_u32(blk + (ks * 16 + lane % 8 + 8 * (lane / 16)) * kBlockLd + rg + 8 * ((lane / 8) % 2)));
    mma_k64(acc, af, reinterpret_cast<const bf*>(slot2(s) + kBlockBytes), dh, lane);
    __syncthreads();
  }
  store_rows(p.dK + (bh * S + q0) * kD, acc, rg, dh, qn, lane);
}
#else  // passes below sm_90 (none in the fatbin today): never launched there
__global__ void __launch_bounds__(kThreads, 2) gqa_cluster_attn_kernel(const GqaClusterAttn) { __trap(); }
#endif

// The kernel's shared-memory opt-in (its largest size), once per device.
void allow_max_smem() {
  static std::mutex mu;
  static std::vector<int> ready;
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (std::find(ready.begin(), ready.end(), dev) != ready.end()) return;
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(gqa_cluster_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes(kMaxCluster))));
  ready.push_back(dev);
}

}  // namespace

std::string gqa_cluster_attn_unsupported(const GqaClusterAttn& p, int cc) {
  if (cc < 90) return "thread-block clusters need compute capability 9.0 or later";
  if (p.D != kD) return "head_dim is not 128";
  if (p.S < 1 || p.S > kBlk * kMaxCluster) return "seq_len is not in 1..512 (one cluster of at most 8 CTAs per head)";
  if (p.B < 1 || p.H < 1 || p.B * p.H * ((p.S + kBlk - 1) / kBlk) > INT_MAX) return "too many heads for the grid";
  if (!aligned16(p.dO) || !aligned16(p.Q) || !aligned16(p.K) || !aligned16(p.V) || p.do_b % 8 != 0 ||
      p.do_h % 8 != 0 || p.do_ld % 8 != 0)
    return "Q, K, V or dO rows not 16-byte aligned";
  const auto a4 = [](const void* x) { return reinterpret_cast<std::uintptr_t>(x) % 4 == 0; };
  if (!a4(p.dQ) || !a4(p.dK) || !a4(p.dV)) return "dQ, dK or dV not 4-byte aligned";
  if (!aligned16(p.dS) || !aligned16(p.Pp)) return "scratch not 16-byte aligned";
  return {};
}

void gqa_cluster_attn_launch(const GqaClusterAttn& p, cudaStream_t stream) {
  allow_max_smem();
  GqaClusterAttn q = p;
  q.p_vec16 = p.S % 8 == 0 && aligned16(p.P);
  q.p_even = p.S % 2 == 0 && reinterpret_cast<std::uintptr_t>(p.P) % 4 == 0;
  const int n = static_cast<int>((p.S + kBlk - 1) / kBlk);
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(n), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(p.B * p.H * n)), cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem_bytes(n), cfg.stream = stream;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gqa_cluster_attn_kernel, q));
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
