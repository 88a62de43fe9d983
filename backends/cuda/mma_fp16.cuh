// Warp-level fp16 tensor-core building blocks (mma.sync m16n8k16, fp32 accumulation), shared by the
// attention kernels of the fast path. A warp owns a 16-row block; its 16×(8·NT) fp32 accumulator is
// acc[NT][4] in the mma C layout: lane = 4·g + t holds rows g and g + 8, columns 2t and 2t + 1 of each
// 8-column tile j (acc[j][0..1]: row g, acc[j][2..3]: row g + 8).
//
// Shared-memory tiles are fp16, row-major with a row stride LD (halves) such that 8 consecutive rows
// start in 8 distinct 16-byte bank groups (LD·2 bytes ≡ 16 mod 128, e.g. LD = 72 or 136), so ldmatrix
// is conflict-free. Tiles are filled with cp.async (16-byte chunks, zero-filled past the valid rows).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace attnbwd::cuda::mma16 {

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// cp.async of 16 bytes into shared memory (dst a pointer or a shared-space address); with valid false the 16 bytes
// are zero-filled (nothing read).
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  cp_async16(smem_u32(dst), src, valid);
}
// cp.async of 4 bytes (any 4-byte aligned source); zero-filled when valid is false.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Double-buffered streaming over blocks of ROWS rows: before the block ending the loop's current step,
// issues the copies of the next block (issue(row0, rows) into the other buffer; row0 = next, rows ≤ ROWS
// up to end), commits them and waits until only they are in flight; when there is no next block, waits
// for everything.
template <int ROWS, class Issue>
__device__ __forceinline__ void issue_next_and_wait(std::int64_t next, std::int64_t end, Issue&& issue) {
  if (next < end) {
    issue(next, static_cast<int>(end - next < ROWS ? end - next : ROWS));
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
}

// Double-buffered streaming over the blocks of ROWS rows of [start, end) (start < end). issue_block(row0,
// rows, buffer) issues one block's copies; the first block's are committed together with whatever the
// caller issued before. body(buffer, rows) runs once per block when its copies have landed, between two
// barriers, while the next block's copies are in flight. ProxyFence (sm_90+): each thread's landed copies
// are also made visible to the async proxy before the barrier, for bodies that read the tiles with wgmma.
template <int ROWS, bool ProxyFence = false, class Issue, class Body>
__device__ __forceinline__ void stream_blocks(std::int64_t start, std::int64_t end, Issue&& issue_block,
                                              Body&& body) {
  const auto rows_at = [&](std::int64_t r0) { return static_cast<int>(end - r0 < ROWS ? end - r0 : ROWS); };
  issue_block(start, rows_at(start), 0);
  cp_async_commit();
  int buf = 0;
  for (std::int64_t r0 = start; r0 < end; r0 += ROWS, buf ^= 1) {
    // the next block into the other buffer (last read one iteration ago; see the end)
    issue_next_and_wait<ROWS>(r0 + ROWS, end,
                              [&](std::int64_t r1, int rows1) { issue_block(r1, rows1, buf ^ 1); });
    if constexpr (ProxyFence) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // this block's tiles are in shared memory for every warp
    body(buf, rows_at(r0));
    __syncthreads();  // every warp is done with buffer `buf` before the next iteration refills it
  }
}

// STAGES-deep streaming over the blocks of ROWS rows of [start, end) (start < end; STAGES ≥ 2), one
// barrier per block: the first STAGES − 1 blocks' copies are issued up front (the first committed
// together with whatever the caller issued before), and block i + STAGES − 1 is issued into the buffer
// block i − 1 used, right after the barrier that ends every warp's reads of it. issue_block(row0, rows,
// buffer), body(buffer, rows) as in stream_blocks; a copy group is committed per step even when empty, so
// cp.async.wait_group STAGES − 2 always means "this block has landed". Ends with every copy landed and a
// barrier (the caller may reuse the buffers). ProxyFence as in stream_blocks.
template <int ROWS, int STAGES, bool ProxyFence = false, class Issue, class Body>
__device__ __forceinline__ void stream_blocks_deep(std::int64_t start, std::int64_t end, Issue&& issue_block,
                                                   Body&& body) {
  static_assert(STAGES >= 2, "stream_blocks_deep: at least two stages");
  const auto rows_at = [&](std::int64_t r0) { return static_cast<int>(end - r0 < ROWS ? end - r0 : ROWS); };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    const std::int64_t r0 = start + static_cast<std::int64_t>(s) * ROWS;
    if (r0 < end) issue_block(r0, rows_at(r0), s);
    cp_async_commit();
  }
  int buf = 0;
  for (std::int64_t r0 = start; r0 < end; r0 += ROWS) {
    cp_async_wait<STAGES - 2>();  // this block's group (and every older one) has landed
    if constexpr (ProxyFence) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // its tiles are visible to every warp, and every warp is done with the previous block
    const std::int64_t next = r0 + static_cast<std::int64_t>(STAGES - 1) * ROWS;
    const int to = buf == 0 ? STAGES - 1 : buf - 1;  // the previous block's buffer
    if (next < end) issue_block(next, rows_at(next), to);
    cp_async_commit();
    body(buf, rows_at(r0));
    buf = buf == STAGES - 1 ? 0 : buf + 1;
  }
  cp_async_wait<0>();
  __syncthreads();
}

// The column sums of a 64-row block held by a 128-thread CTA, 16 rows per warp in the C layout: cs[j][e] is
// this thread's sum over its rows of column 8j + 2t + e (j < NT); added over the warp's 8 row groups (lanes
// 4 apart, the same order on every lane), then over the 4 warps in warp order through red (4·8·NT floats
// of shared memory no other thread is using), into out[0, 8·NT). Every thread of the CTA must call it;
// red is still being read when it returns (a caller reusing red puts a barrier first). Fixed order: the
// same bits on every run. column_sums_128: the same for any 128 threads (tid: the thread's index among them)
// that meet at `sync` (a barrier over exactly those threads).
template <int NT, class Tid, class Sync>
__device__ __forceinline__ void column_sums_128(float (&cs)[NT][2], float* red, float* out, Tid tid, Sync&& sync) {
  constexpr int kCols = 8 * NT, kCtaThreads = 128;
  const int w = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int o = 4; o < 32; o *= 2)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      cs[j][0] += __shfl_xor_sync(0xffffffffu, cs[j][0], o);
      cs[j][1] += __shfl_xor_sync(0xffffffffu, cs[j][1], o);
    }
  if (g == 0)
#pragma unroll
    for (int j = 0; j < NT; ++j) red[w * kCols + j * 8 + 2 * t] = cs[j][0], red[w * kCols + j * 8 + 2 * t + 1] = cs[j][1];
  sync();
  const auto add = [&](int c) { out[c] = ((red[c] + red[kCols + c]) + red[2 * kCols + c]) + red[3 * kCols + c]; };
  if constexpr (kCols < kCtaThreads) {
    if (tid < kCols) add(tid);
  } else {
    for (int c = tid; c < kCols; c += kCtaThreads) add(c);
  }
}
template <int NT>
__device__ __forceinline__ void cta_column_sums(float (&cs)[NT][2], float* red, float* out) {
  column_sums_128(cs, red, out, threadIdx.x, [] { __syncthreads(); });
}

__device__ __forceinline__ std::uint32_t half2_bits(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

__device__ __forceinline__ void mma16816(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.0f;
}

template <int NT>
__device__ __forceinline__ void scale_acc(float (&acc)[NT][4], float f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] *= f;
}

// Issues the copy of rows [row0, row0 + rows) × COLS halves of a row-major fp16 matrix (row stride ldg
// halves, 16-byte aligned rows) into a ROWS-row fp16 tile (stride LD); rows ≥ rows are zero-filled.
// rows ≥ 1. The caller commits and waits.
template <int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void issue_tile(__half* s, const __half* __restrict__ g, std::int64_t ldg, std::int64_t row0,
                                           int rows) {
  static_assert(ROWS * (COLS / 8) % THREADS == 0, "whole 16-byte chunks per thread");
#pragma unroll
  for (int u = 0; u < ROWS * (COLS / 8) / THREADS; ++u) {
    const int i = threadIdx.x + u * THREADS, r = i / (COLS / 8), c8 = (i % (COLS / 8)) * 8;
    const bool valid = r < rows;
    cp_async16(s + r * LD + c8, g + (row0 + (valid ? r : 0)) * ldg + c8, valid);
  }
}

// acc[j] += A·Bᵀ over k = 0..K-1: A = 16 rows of an fp16 tile, B = rows [n][k] of one (n = 8·NT); both
// with row stride LD.
template <int NT, int K, int LD>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const __half* A, const __half* B) {
  static_assert(NT % 2 == 0, "pairs of n tiles per ldmatrix.x4");
  static_assert(K % 16 == 0, "whole k steps");
  const int lane = threadIdx.x & 31;
  // x4 matrices: A (rows 0-7 | 8-15) × (k 0-7 | 8-15); B (k 0-7 | 8-15) × (n tile j | j + 1)
  const std::uint32_t a0 = smem_u32(A + (lane & 15) * LD + (lane >> 4) * 8);
  const std::uint32_t b0 = smem_u32(B + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8);
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 16) {
    std::uint32_t a[4];
    ldsm4(a, a0 + 2 * k0);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      std::uint32_t b[4];
      ldsm4(b, b0 + 2 * (j * 8 * LD + k0));
      mma16816(acc[j], a[0], a[1], a[2], a[3], b[0], b[1]);
      mma16816(acc[j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
    }
  }
}

// This warp's 16×64 fp32 accumulator as the A operand (fp16, k = its 64 columns) of m16n8k16.
__device__ __forceinline__ void to_afrag(std::uint32_t (&a)[4][4], const float (&s)[8][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    a[kc][0] = half2_bits(s[2 * kc][0], s[2 * kc][1]);
    a[kc][1] = half2_bits(s[2 * kc][2], s[2 * kc][3]);
    a[kc][2] = half2_bits(s[2 * kc + 1][0], s[2 * kc + 1][1]);
    a[kc][3] = half2_bits(s[2 * kc + 1][2], s[2 * kc + 1][3]);
  }
}

// acc[j] += A·B over k = 0..63: A from to_afrag, B = rows [k][n] of an fp16 tile (stride LD, n = 8·NT).
template <int NT, int LD>
__device__ __forceinline__ void mma_rb(float (&acc)[NT][4], const std::uint32_t (&a)[4][4], const __half* B) {
  static_assert(NT % 2 == 0, "pairs of n tiles per ldmatrix.x4");
  const int lane = threadIdx.x & 31;
  // x4.trans matrices: (k 0-7 | 8-15) × (n tile j | j + 1)
  const std::uint32_t b0 = smem_u32(B + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      std::uint32_t b[4];
      ldsm4_trans(b, b0 + 2 * (kc * 16 * LD + j * 8));
      mma16816(acc[j], a[kc][0], a[kc][1], a[kc][2], a[kc][3], b[0], b[1]);
      mma16816(acc[j + 1], a[kc][0], a[kc][1], a[kc][2], a[kc][3], b[2], b[3]);
    }
}

}  // namespace attnbwd::cuda::mma16
