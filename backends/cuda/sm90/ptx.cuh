// Hopper (sm_90a) building blocks as inline PTX: mbarriers, TMA tile loads, wgmma. Device code here
// exists only in the sm_90a pass (ATTNBWD_SM90_DEVICE); other passes see declarations that trap, so
// one .cu can be compiled for every arch of the fatbin and dispatched at run time.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver library needed to use it)

#include <cstdint>

#include "../griddep.cuh"  // griddep_launch_dependents, griddep_wait (programmatic dependent launch)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNBWD_SM90_DEVICE 1
#endif

namespace attnbwd::cuda::sm90 {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// The first 1024-byte boundary at or after `raw` (dynamic shared memory; swizzled wgmma/TMA tiles need
// it), formed by adding an offset to the shared pointer: a round trip through an integer would lose the
// address space, and every access through the result would be a generic ld/st (long-scoreboard latency)
// instead of ld.shared/st.shared (ncu, 2026-12-01: 32 generic loads of P per block in mha's attention
// kernels were 9-10 % of their stall samples; out_proj's kernel staged its epilogue the same way).
template <class T>
__device__ __forceinline__ std::uint8_t* align_smem_1024(T* raw) {
  std::uint8_t* b = reinterpret_cast<std::uint8_t*>(raw);
  return b + ((1024u - (static_cast<unsigned>(__cvta_generic_to_shared(raw)) & 1023u)) & 1023u);
}

#if defined(ATTNBWD_SM90_DEVICE)

// ---- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// An arrival on bar once every cp.async this thread issued before it has landed (counted in the barrier's
// expected arrivals: noinc).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  const std::uint32_t a = smem_addr(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA -------------------------------------------------------------------------------------------
// 2-D tile load global -> shared, completing `bytes` on `bar`. c0 is the innermost coordinate.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// 3-D tile load global -> shared, completing `bytes` on `bar` (coordinates outside the tensor read as zeros).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Contiguous copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, completing on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// 3-D tile store shared -> global (bulk group; rows/columns outside the tensor are not written).
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
// 2-D tile store shared -> global (bulk group; rows/columns outside the tensor are not written).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N committed bulk groups are still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Waits until at most N committed bulk groups are incomplete (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Orders this thread's generic-proxy view of global memory (e.g. data another CTA released) before its later
// async-proxy accesses (TMA / bulk copies) of it.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// ---- registers and warpgroups -----------------------------------------------------------------------
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
// Barrier over `threads` threads (a multiple of 32) with id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- global-memory flags -------------------------------------------------------------------------------
// Load with acquire semantics at GPU scope (a spin on a counter that other CTAs release with
// __threadfence + atomicAdd).
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// ---- wgmma -------------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous MMAs.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle. `lbo`/`sbo` in bytes (PTX ISA, "Matrix
// Descriptor Format"): K-major operands use sbo = 1024 (8 rows of 128 B) and ignore lbo; MN-major
// operands use lbo = offset between 64-element MN chunks, sbo = offset between 8-row K groups.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo, std::uint32_t sbo) {
  auto enc = [](std::uint32_t x) { return static_cast<std::uint64_t>((x & 0x3FFFF) >> 4); };
  return enc(addr) | (enc(lbo) << 16) | (enc(sbo) << 32) | (1ull << 62);
}

// D[64x256] (+)= A[64x16] * B[16x256], bf16 operands from shared memory, fp32 accumulators.
// TransA/TransB: 0 = K-major, 1 = M-/N-major. accumulate = 0 overwrites D.
template <int TransA, int TransB>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b,
                                                      int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16\n{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA), "n"(TransB));
}

// D[64x128] (+)= A[64x16]·B[16x128], bf16 from shared memory, fp32 accumulators d[4·j + r] for n8 block j (the m16n8 C
// layout: row g (r < 2) or g + 8 of the warp's 16, column 8·j + 2·t + (r & 1) for lane 4·g + t). TransA: 0 = A K-major,
// 1 = A M-major; B N-major (two 64-column swizzle chunks, lbo apart).
template <int TransA>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA));
}

// The 32 accumulator operands of an m64n64 wgmma (d[8][4] in order), for the asm statements below.
#define ATTNBWD_WGMMA_N64_ACC(d)                                                                                 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),      \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),   \
      "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),   \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),   \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define ATTNBWD_WGMMA_N64_D "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// Operand types of the m64n64k16 products below: fp16 or bf16 (both with fp32 accumulators).
enum class Mma16 { F16, BF16 };

// D[64x64] (+)= A[64x16]·B[16x64] with 16-bit operands (Ty) and fp32 accumulators. d[j][r] is the
// mma.sync m16n8 C layout of this warp's 16 rows of D (warp w of the warpgroup: rows 16w..16w+15; lane
// 4g + t: rows g (r < 2) and g + 8, columns 8j + 2t + (r & 1)). TransB: 0 = B K-major ([n][k] rows), 1 = B
// N-major ([k][n] rows). accumulate = 0 overwrites D.
// A from shared memory, K-major ([m][k] rows).
template <Mma16 Ty, int TransB>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   int accumulate) {
  if constexpr (Ty == Mma16::F16)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16\n"
                 ATTNBWD_WGMMA_N64_D ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : ATTNBWD_WGMMA_N64_ACC(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransB));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
                 ATTNBWD_WGMMA_N64_D ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : ATTNBWD_WGMMA_N64_ACC(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransB));
}
// A from registers: a = this warp's 16×16 A fragment in the mma.sync m16n8k16 A layout (mma16::to_afrag).
template <Mma16 Ty, int TransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const std::uint32_t (&a)[4],
                                                   std::uint64_t desc_b, int accumulate) {
  if constexpr (Ty == Mma16::F16)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16\n"
                 ATTNBWD_WGMMA_N64_D ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : ATTNBWD_WGMMA_N64_ACC(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TransB));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
                 ATTNBWD_WGMMA_N64_D ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : ATTNBWD_WGMMA_N64_ACC(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TransB));
}
// The fp16 forms under their earlier names (mha's attention kernels).
template <int TransB>
__device__ __forceinline__ void wgmma_m64n64k16_f16_ss(float (&d)[8][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                       int accumulate) {
  wgmma_m64n64k16_ss<Mma16::F16, TransB>(d, desc_a, desc_b, accumulate);
}
template <int TransB>
__device__ __forceinline__ void wgmma_m64n64k16_f16_rs(float (&d)[8][4], const std::uint32_t (&a)[4],
                                                       std::uint64_t desc_b, int accumulate) {
  wgmma_m64n64k16_rs<Mma16::F16, TransB>(d, a, desc_b, accumulate);
}
// The same fence as fence_regs for an [J][4] accumulator (J 8-column chunks: [8][4] for n64, [2][4] for n16).
template <int J>
__device__ __forceinline__ void fence_acc(float (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+f"(d[j][r])::"memory");
}
// D[64x16] (+)= A[64x16]·B[16x16], fp16 operands, A from registers (as wgmma_m64n64k16_f16_rs), B K-major ([n][k]
// rows); d[j][r] the same C layout over two 8-column chunks. The narrow last block of mha's attention kernels.
__device__ __forceinline__ void wgmma_m64n16k16_f16_rs(float (&d)[2][4], const std::uint32_t (&a)[4],
                                                       std::uint64_t desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\nwgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16\n"
               "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                 "+f"(d[1][2]), "+f"(d[1][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

#endif  // ATTNBWD_SM90_DEVICE

}  // namespace attnbwd::cuda::sm90
