// vision_varlen_rope_backward on the CUDA fast path (spec §5), v1.
//
// Stages (main = the caller's stream, side = the context's side stream; no atomics anywhere, so every
// run gives the same bits):
//  1. side: dAO = dY·Wp (cuBLASLt); grad_proj_bias = Σ_tokens dY (two-level column sums, fixed order).
//     main: QKV = X·Wqkvᵀ (cuBLASLt); the block table from the device cu_seqlens; bias + RoPE on
//     q and k, in place (one pass over QKV).
//  2. main: attention forward recompute per (64-query block, head): AO, lse, delta = Σ dO·O
//     (vision_varlen_rope_backward_attn.cu).
//  3. side: grad_proj_weight = dYᵀ·AO. main: dQ kernel and dK/dV kernel, RoPE backward in their
//     epilogues, into dQKV [S, 3C] in the reference's [3][H][D] column layout.
//  4. side: grad_qkv_weight = dQKVᵀ·X. main: grad_hidden_states = dQKV·Wqkv; grad_qkv_bias =
//     Σ_tokens dQKV.
//
// Precision: Default runs the GEMMs with fp16 operands (fp32 tensors converted here: X, dY, the two
// weights, and AO and dQKV once they exist), fp32 accumulation and fp32 results, at twice the TF32
// tensor-core rate; spec §5 measured all-GEMMs-fp16 to pass every workload. ATTNBWD_CUDA_FP32_GEMM=tf32
// instead runs them on the fp32 tensors with TF32 (CUBLAS_COMPUTE_32F_FAST_TF32; also measured to
// pass), for A/B timing. The attention products are fp16 (mma.sync m16n8k16) with fp16 GEMMs, TF32
// with TF32 GEMMs or ATTNBWD_CUDA_VARLEN_ATTN=tf32. Strict runs the GEMMs in true fp32
// (CUBLAS_COMPUTE_32F) and the attention products as 3xTF32: fp32-accurate. Softmax, RoPE, bias
// sums: fp32 in both.
//
// cu_seqlens: the kernels read only the device array (the block table is built on the device), so
// this file never copies it to the host and never synchronises. Validation (starts at 0,
// non-decreasing, ends at S) is the dispatcher's, on the host copy (`cu_seqlens_host`); the device
// side clamps every sequence range to [0, S], so even an invalid array cannot make a kernel read or
// write out of bounds.
//
// CUDA graphs: run() enqueues the stages through Context::enqueue, so with ATTNBWD_CUDA_GRAPHS=1, or auto (the
// default) at S <= 1536, a call whose key was seen before replays a captured graph (the ~25 launches of a call at
// small S cost host time comparable to their kernels'; see run() for the key and the measurement).
//
// Diagnostics: ATTNBWD_CUDA_STAGES=1 serialises the stages on the caller's stream and prints their
// times (stages.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_fp16.h>

#include "check.hpp"
#include "sizes.hpp"
#include "context.hpp"
#include "convert.hpp"
#include "cuda_backend.hpp"
#include "graph_key.hpp"
#include "lt_gemm.hpp"
#include "mixed_gemm_sm90.hpp"
#include "stages.hpp"
#include "switches.hpp"
#include "vision_varlen_rope_backward_attn.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;
constexpr int kSumRows = 64;  // rows per partial column sum

__device__ __forceinline__ float ldf(const float* p) { return *p; }
__device__ __forceinline__ float ldf(const __half* p) { return __half2float(*p); }

// out = QKV + bias, q and k rotated: lo' = lo·cos[d] − hi·sin[d], hi' = hi·cos[d+64] + lo·sin[d+64];
// In = Out = float: in place (out == qkv); In = float, Out = __half: the fp16 copy the fp16 attention kernels read;
// In = Out = __half: in place on the fp16 QKV of ATTNBWD_CUDA_VARLEN_QKV=lt16.
// One thread per (token, head slot of 3H, d < D/2).
template <class In, class Out>
__global__ void bias_rope(const In* qkv, Out* out, const float* __restrict__ bias, const float* __restrict__ cos,
                          const float* __restrict__ sin, int64_t S, int H, int D) {
  const int half = D / 2;
  const int64_t per_tok = static_cast<int64_t>(3) * H * half;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= S * per_tok) return;
  const int64_t tok = idx / per_tok;
  const int rem = static_cast<int>(idx % per_tok);
  const int slot = rem / half, d = rem % half;
  const int64_t col = static_cast<int64_t>(slot) * D + d;
  const In* row = qkv + tok * 3 * H * D;
  Out* orow = out + tok * 3 * H * D;
  float lo = ldf(row + col) + bias[col], hi = ldf(row + col + half) + bias[col + half];
  if (slot < 2 * H) {
    const float* c = cos + tok * D;
    const float* s = sin + tok * D;
    const float nlo = lo * c[d] - hi * s[d];
    const float nhi = hi * c[d + half] + lo * s[d + half];
    lo = nlo, hi = nhi;
  }
  if constexpr (std::is_same_v<Out, __half>) {
    orow[col] = __float2half_rn(lo);
    orow[col + half] = __float2half_rn(hi);
  } else {
    orow[col] = lo;
    orow[col + half] = hi;
  }
}

// bias_rope's contract with one block per token and four consecutive d per thread: 16-byte loads of the
// two halves, the bias and the token's cos/sin rows, 8-byte (fp16) or 16-byte stores, and 32-bit index math
// (bias_rope divides a 64-bit index per element). Needs D % 8 == 0, 3·H·D < 2³¹ and 16-byte aligned qkv,
// out, bias, cos, sin (bias_rope_vec_ok). The default since 2026-12-01 (fifth session: #10 5.19 -> 5.04 ms per
// call; bias_rope had measured 0.27 ms on #10, ~2.4x its DRAM time); ATTNBWD_CUDA_VARLEN_BIASROPE=scalar
// keeps bias_rope.
__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 ld4(const __half* p) {  // 8-byte aligned
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void st4(__half* p, float4 v) {
  const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const unsigned*>(&a);
  u.y = *reinterpret_cast<const unsigned*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}
// Wide (ATTNBWD_CUDA_VARLEN_BIASROPE=vec1): blockIdx.y picks the token's block of 256 tasks, one task per thread, so
// every load of a thread is issued at once (the loop of the one-block form issues an iteration's loads after the last
// iteration's stores: ~5 dependent round trips per thread at H = 28, where the pass sits between the QKV projection and
// the attention, beside the dAO GEMM: 14.4 µs at #8 for 8 MB, thirty-second session's trace). The same bits.
template <class In, class Out, bool Wide = false>
__global__ void __launch_bounds__(256) bias_rope_vec(const In* qkv, Out* out, const float* __restrict__ bias,
                                                     const float* __restrict__ cos, const float* __restrict__ sin,
                                                     int H, int D) {
  const int64_t tok = blockIdx.x;
  const int half = D / 2, quads = half / 4, tasks = 3 * H * quads;
  const In* row = qkv + tok * 3 * H * D;
  Out* orow = out + tok * 3 * H * D;
  const float* c = cos + tok * D;
  const float* s = sin + tok * D;
  const int k0 = static_cast<int>(threadIdx.x) + (Wide ? static_cast<int>(blockIdx.y * blockDim.x) : 0);
  for (int k = k0; k < tasks; k += Wide ? static_cast<unsigned>(tasks) : blockDim.x) {
    const int slot = k / quads, d = (k - slot * quads) * 4, col = slot * D + d;
    float4 lo = ld4(row + col), hi = ld4(row + col + half);
    const float4 blo = ld4(bias + col), bhi = ld4(bias + col + half);
    lo.x += blo.x, lo.y += blo.y, lo.z += blo.z, lo.w += blo.w;
    hi.x += bhi.x, hi.y += bhi.y, hi.z += bhi.z, hi.w += bhi.w;
    if (slot < 2 * H) {
      const float4 cl = ld4(c + d), sl = ld4(s + d), ch = ld4(c + d + half), sh = ld4(s + d + half);
      const float4 nlo = make_float4(lo.x * cl.x - hi.x * sl.x, lo.y * cl.y - hi.y * sl.y, lo.z * cl.z - hi.z * sl.z,
                                     lo.w * cl.w - hi.w * sl.w);
      const float4 nhi = make_float4(hi.x * ch.x + lo.x * sh.x, hi.y * ch.y + lo.y * sh.y, hi.z * ch.z + lo.z * sh.z,
                                     hi.w * ch.w + lo.w * sh.w);
      lo = nlo, hi = nhi;
    }
    st4(orow + col, lo);
    st4(orow + col + half, hi);
  }
}
bool bias_rope_vec_ok(const void* qkv, const void* out, const void* bias, const void* cos, const void* sin, int64_t H,
                      int64_t D) {
  return D % 8 == 0 && 3 * H * D < (int64_t{1} << 31) && aligned16(qkv) && aligned16(out) && aligned16(bias) &&
         aligned16(cos) && aligned16(sin);
}

// part[c, col] = Σ_{r in chunk c} x[r, col] (chunks of kSumRows rows), in row order.
__global__ void column_sums_partial(const float* __restrict__ x, int64_t rows, int64_t cols, float* __restrict__ part) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kSumRows;
  const int64_t r1 = r0 + kSumRows < rows ? r0 + kSumRows : rows;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += x[r * cols + col];
  part[blockIdx.y * cols + col] = s;
}

__global__ void column_sums_final(const float* __restrict__ part, int64_t chunks, int64_t cols, float* __restrict__ out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += part[c * cols + col];
  out[col] = s;
}

int64_t chunks_of(int64_t rows) { return (rows + kSumRows - 1) / kSumRows; }

// out[cols] = Σ_r part[r, cols] over rows r < rows, in row order.
void sum_rows(const float* part, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  column_sums_final<<<blocks_for(cols, 256), 256, 0, stream>>>(part, rows, cols, out);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

// out[cols] = column sums of x [rows, cols], using part [chunks_of(rows), cols].
void column_sums(const float* x, int64_t rows, int64_t cols, float* part, float* out, cudaStream_t stream) {
  const int threads = 256;
  const dim3 grid(blocks_for(cols, threads), static_cast<unsigned>(chunks_of(rows)));
  column_sums_partial<<<grid, threads, 0, stream>>>(x, rows, cols, part);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  sum_rows(part, chunks_of(rows), cols, out, stream);
}

}  // namespace

Support supports(const VisionVarlenShape& s, const Options&) {
  const Context& ctx = Context::current();
  if (!ctx.no_code().empty()) return {ctx.no_code()};
  if (s.head_dim != varlen::kHeadDim)
    return {"head_dim " + std::to_string(s.head_dim) + " (the attention kernels need 128)"};
  if (s.total_seq_len <= 0 || s.num_sequences <= 0) return {"no tokens"};
  if (s.num_heads <= 0 || s.num_heads > 65535 || s.hidden_size != s.num_heads * s.head_dim)
    return {"unsupported head count"};
  if (s.total_seq_len > (int64_t{1} << 30) || s.num_sequences > (int64_t{1} << 30) ||
      varlen::block_slots(s.total_seq_len, s.num_sequences) >= (int64_t{1} << 31) - 1)
    return {"too many tokens or sequences"};
  if (chunks_of(s.total_seq_len) > 65535) return {"too many tokens for the bias sums"};
  // bias_rope: one thread per (token, head slot of 3H, d < D/2), 256 per block, grid.x < 2^31.
  if (s.total_seq_len * 3 * s.num_heads * (s.head_dim / 2) / 256 >= (int64_t{1} << 31) - 1)
    return {"too many tokens for the bias + RoPE kernel"};
  return {};
}

namespace {

// Which part of the op enqueue_op enqueues: all of it, or the two parts of a call whose cu_seqlens the host reads
// meanwhile (run_begin / run_finish): stage 1 without grad_proj_bias (scratch only: every output untouched), then the
// rest.
enum class Part { Whole, First, Rest };

// The op's GPU work on `stream` (and the side stream through fork/join): run() enqueues it directly or as a
// captured CUDA graph (Context::enqueue); `part` as above (the same kernels in the same order on each stream).
void enqueue_op(Context& ctx, const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o,
                cudaStream_t stream, Part part = Part::Whole) {
  const int64_t S = s.total_seq_len, n = s.num_sequences, C = s.hidden_size, C3 = 3 * C, H = s.num_heads,
                D = s.head_dim;
  const bool strict = o.precision == Precision::Strict;
  const bool use_fp16 = !strict && fp16_gemms();
  // ATTNBWD_CUDA_VARLEN_ATTN=auto|tf32|fp16-v1: Default's attention products (auto: fp16 with fp16
  // GEMMs; fp16-v1: the same products from the older fp32-tile kernels, for A/B timing).
  const int attn = env_switch("ATTNBWD_CUDA_VARLEN_ATTN", {"auto", "tf32", "fp16-v1"});
  const varlen::Products products = strict                   ? varlen::Products::Tf32x3
                                    : !use_fp16 || attn == 1 ? varlen::Products::Tf32
                                    : attn == 2              ? varlen::Products::Fp16Smem32
                                                             : varlen::Products::Fp16;
  const cublasComputeType_t compute = strict ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  const int64_t slots = varlen::block_slots(S, n), chunks = chunks_of(S);
  // ATTNBWD_CUDA_VARLEN_DQKV=auto|fp16|fp32: with fp16 (auto), the fp16-tile dQ and dK/dV kernels write
  // dQKV in fp16 (the projection GEMMs' operand) and per-CTA column sums for grad_qkv_bias; with fp32 (for
  // A/B) they write fp32 dQKV that a conversion pass and a column-sum pass then read. fp16 measured 1.02-
  // 1.07× faster on every workload (H200, 2026-12-01, perf/NOTES.md).
  const bool half_dqkv = products == varlen::Products::Fp16 &&
                         env_switch("ATTNBWD_CUDA_VARLEN_DQKV", {"auto", "fp16", "fp32"}) != 2;
  // ATTNBWD_CUDA_VARLEN_BWD=auto|two|one: the fp16-tile dQ and dK/dV kernels as one launch of both kinds of CTA
  // (auto, one: grid z = 2) or as two launches (two; the same bits). The two read the same inputs and write disjoint
  // outputs, so in one launch the dK/dV CTAs need not wait for the last dQ CTA: at S <= 256 each kernel is one
  // partial wave (#8: 112 CTAs of 2 per SM, 21.6 + 27.7 us one after the other, 37.3 us as one launch).
  // Measured on an H200 (fifteenth session, perf/NOTES.md): 1.022x geomean over all 16 workloads, #8, #11 1.10x,
  // #1 1.06x. Ignored by the other product modes.
  const bool one_bwd_launch = env_switch("ATTNBWD_CUDA_VARLEN_BWD", {"auto", "two", "one"}) != 1;
  // ATTNBWD_CUDA_VARLEN_WGMMA=auto|off|dq|dkv|bwd|fwd|all: the fp16-tile attention kernels on mma.sync (off) or, on
  // sm_90a wgmma (vision_varlen_rope_backward_attn_sm90.cu), the dQ kernel (dq), the dK/dV kernel (dkv), both (bwd),
  // the forward recompute (fwd) or all three (all): one warpgroup per 64-row block, the score products from shared
  // memory, the products with P or dS as register operands; with both backward kernels on wgmma (bwd, all)
  // ATTNBWD_CUDA_VARLEN_BWD applies to them too (one launch or two). auto = all on an sm_90 device, off elsewhere.
  // Measured on an H200 (sixteenth session, perf/NOTES.md): all 1.038x geomean over the 16 workloads
  // (1.05-1.08x at S >= 4096; #10's attention kernels 1144 -> 899 us under ncu); dq or dkv alone ~1.00x (they give
  // up the one-launch backward), fwd alone 1.014x. A wgmma form named on a device other than sm_90 is an Error; the
  // other product modes ignore the switch.
  constexpr int kWgmmaAll = varlen::kSm90Dq | varlen::kSm90Dkv | varlen::kSm90Fwd;
  constexpr int kWgmmaForms[] = {kWgmmaAll, 0, varlen::kSm90Dq, varlen::kSm90Dkv,
                                 varlen::kSm90Dq | varlen::kSm90Dkv, varlen::kSm90Fwd, kWgmmaAll};
  const int wgmma_switch = env_switch("ATTNBWD_CUDA_VARLEN_WGMMA", {"auto", "off", "dq", "dkv", "bwd", "fwd", "all"});
  const int wgmma_form = wgmma_switch == 0 && ctx.cc() != 90 ? 0 : kWgmmaForms[wgmma_switch];
  const int attn_sm90 = products == varlen::Products::Fp16 ? wgmma_form : 0;
  if (attn_sm90 != 0 && ctx.cc() != 90)
    throw Error("ATTNBWD_CUDA_VARLEN_WGMMA",
                "wgmma needs an sm_90 device (this one is compute capability " + std::to_string(ctx.cc()) + ")");

  // Scratch (slot 0), every piece a multiple of 64 floats (256 B):
  // qkv | dqkv (not with fp16 dQKV) | dAO | AO | lse | delta | proj-bias partials | qkv-bias partials | block table.
  const int64_t n_qkv = round_up(S * C3, 64), n_x = round_up(S * C, 64), n_h = round_up(S * H, 64),
                n_pp = round_up(chunks * C, 64), n_pq = round_up(chunks * C3, 64), n_tab = round_up(2 * slots, 64);
  // fp16 copies (Default with fp16 GEMMs), in floats of space: X | dY | AO | dQKV | Wqkv | Wp | QKV | dAO
  // (the last two for the fp16 attention kernels).
  const int64_t n_w = round_up(C3 * C, 128) / 2, n_wp = round_up(C * C, 128) / 2;
  const int64_t n_half = use_fp16 ? (4 * n_x + 2 * n_qkv) / 2 + n_w + n_wp : 0;  // n_x, n_qkv: multiples of 64
  const int64_t n_pd = half_dqkv ? round_up(slots * C3, 64) : 0;  // per-CTA dQKV column sums
  const int64_t n_dqkv = half_dqkv ? 0 : n_qkv;  // fp32 dQKV: not written when the kernels write fp16
  const int64_t total = n_qkv + n_dqkv + 2 * n_x + 2 * n_h + n_pp + n_pq + n_tab + n_half + n_pd;
  // Part::Rest: the first part's scratch, as it left it (same shape and switches: the same size, no growth).
  float* base =
      static_cast<float*>(ctx.scratch(0, static_cast<std::size_t>(total) * sizeof(float), stream, part != Part::Rest));
  float* qkv = base;
  float* dqkv = half_dqkv ? nullptr : qkv + n_qkv;
  float* dAO = qkv + n_qkv + n_dqkv;
  float* AO = dAO + n_x;
  float* lse = AO + n_x;
  float* delta = lse + n_h;
  float* part_proj = delta + n_h;
  float* part_qkv = part_proj + n_pp;
  int2* table = reinterpret_cast<int2*>(part_qkv + n_pq);
  __half* Xh = reinterpret_cast<__half*>(part_qkv + n_pq + n_tab);
  __half* dYh = Xh + n_x;
  __half* AOh = dYh + n_x;
  __half* dqkvh = AOh + n_x;
  __half* Wqkvh = dqkvh + n_qkv;
  __half* Wph = Wqkvh + 2 * n_w;
  __half* qkvh = Wph + 2 * n_wp;
  __half* dAOh = qkvh + n_qkv;
  float* part_dqkv = base + (total - n_pd);
  // Products::Fp16: the attention kernels read fp16 q'|k'|v and dO (written so by bias + RoPE and by the
  // dAO GEMM) and write AO in fp16; no fp32 copies of those, no conversion passes.
  const bool half_attn = products == varlen::Products::Fp16;

  const float* X = a.hidden_states.data;
  const float* dY = a.grad_output.data;
  const float* Wqkv = a.qkv_weight.data;
  const float* Wp = a.proj_weight.data;
  // Operand x of an fp32 tensor: its fp16 copy h when the GEMMs run fp16, else x itself.
  const auto opnd = [&](const float* x, const __half* h) { return operand(use_fp16, x, h); };

  // ATTNBWD_CUDA_VARLEN_QKV=auto|lt|mixed|lt16: Default's QKV projection as cuBLASLt's fp16 GEMM on converted copies of X
  // and Wqkv (lt), or (mixed; sm_90, S ≤ 512) as the mixed-input kernel of mixed_gemm_sm90.cu, which reads the fp32
  // Wqkv once, rounds it to fp16 in shared memory and writes the fp16 copy that dX's GEMM reads on the way: 231 MB of
  // DRAM traffic for the weight instead of 308 (#8). mixed where the kernel cannot take the call is an Error (raised
  // here, before the op's first kernel is enqueued); the modes without fp16 GEMMs (Strict,
  // ATTNBWD_CUDA_FP32_GEMM=tf32) ignore the switch. auto = mixed where the kernel takes the call and S <= 256, else
  // lt16 (below). Measured on an H200 (seventeenth session, perf/NOTES.md): at #8 the kernel takes 70 us against 63 + 27 us of
  // conversion and GEMM, per call 1.040x, 1.072x, 1.073x at #8, #11, #1 (S <= 256); at S = 373 and 392 (#12, #0: four
  // 64-row blocks per warpgroup, the products no longer hidden under the weight's DRAM time) 112 us against 66 + 49,
  // per call 1.000-1.008x, so auto leaves those to cuBLASLt.
  // lt16 (with the fp16 attention kernels; otherwise as lt): the same cuBLASLt GEMM with an fp16 result written
  // straight into the fp16 QKV the attention kernels read, and bias + RoPE in place on it (no fp32 QKV: at S = 8192
  // the fp32 result's 352 MB write and read become a 176 MB write, read and rewrite; bias and RoPE then apply to
  // the fp16-rounded product, one more rounding; float64 PyTorch: relative L2 1.3-1.5e-3 at #0, #2, #10, every
  // element within the workloads' tolerance). Measured on an H200 (twenty-first session, three runs per side): lt16/lt
  // 1.009x geomean over the 13 workloads with S > 256 (1.01-1.02x on the steady ones: #2, #9, #10, #12, #13; the
  // bimodal #4, #14, #15 0.96-1.05x), the stages at #10 QKV 0.978 -> 0.966 ms and bias + RoPE 0.154 -> 0.128 ms.
  // So auto = lt16 wherever it does not take the mixed kernel.
  const int qkv_switch = env_switch("ATTNBWD_CUDA_VARLEN_QKV", {"auto", "lt", "mixed", "lt16"});
  // ATTNBWD_CUDA_VARLEN_BIASROPE=auto|vec|scalar|vec1: bias_rope_vec where it applies (vec; measured 1.02-1.03x per
  // call against scalar on 5 of 6 workloads, perf/NOTES.md), the element-pair kernel bias_rope (scalar), or
  // bias_rope_vec with one task per thread (vec1, auto since the forty-sixth session: H100, two interleaved rounds at
  // #0 #1 #3 #5 #7 #8 #11 #12, vec1/vec 1.000-1.024x, with TABLE=side 1.002-1.029x; perf/NOTES.md). The same bits.
  // Read here, before anything is enqueued (a bad value is an Error first).
  const int bias_rope_mode = env_switch("ATTNBWD_CUDA_VARLEN_BIASROPE", {"auto", "vec", "scalar", "vec1"});
  const bool bias_rope_wide = bias_rope_mode == 0 || bias_rope_mode == 3;
  // ATTNBWD_CUDA_VARLEN_TABLE=auto|main|side: where the block table (one CTA, ~3.5 µs) is built in stage 1: on the main
  // stream between the QKV projection and bias + RoPE (main, the order before the forty-sixth session), or on the side
  // stream after its conversions (side, auto), off the main stream's chain: at S ≤ 256 the main stream runs the mixed
  // QKV kernel then, which leaves 20 SMs free (thirty-second session's #8 trace: table 95.4-99.1 µs between the mixed
  // kernel and bias + RoPE). Only the attention reads the table, after stage 1's join. The same bits. Measured (H100,
  // forty-fifth session, two interleaved rounds): side/main 0.999-1.020x alone, 1.002-1.029x with vec1 (above).
  // H200 (forty-sixth session, two rounds over the 16): vec1 + side against vec + main 0.997-1.027x, E 0.4185 -> 0.4222.
  const bool table_on_side = env_switch("ATTNBWD_CUDA_VARLEN_TABLE", {"auto", "main", "side"}) != 1;
  sm90::MixedGemm mg;
  mg.M = S, mg.N = C3, mg.K = C, mg.lda = C, mg.ldw = C, mg.ldc = C3;
  mg.a = Xh, mg.w = Wqkv, mg.c = qkv, mg.w16 = Wqkvh;
  bool mixed_qkv = false;
  if (use_fp16 && (qkv_switch == 0 || qkv_switch == 2)) {
    const std::string why = ctx.cc() != 90
                                ? "not an sm_90 device (compute capability " + std::to_string(ctx.cc()) + ")"
                                : sm90::mixed_gemm_unsupported(mg);
    if (qkv_switch == 2 && !why.empty())
      throw Error("ATTNBWD_CUDA_VARLEN_QKV", "the mixed-input QKV kernel cannot take this call: " + why);
    mixed_qkv = why.empty() && (qkv_switch == 2 || S <= 256);
  }
  const bool qkv16 = half_attn && !mixed_qkv && (qkv_switch == 0 || qkv_switch == 3);
  StageTimer stages(stream);
  const cudaStream_t side = stages.side_or_main(ctx.side_stream());
  const int side_slot = stages.single_stream() ? 0 : 1;

  // 1. side: dAO, grad_proj_bias. main: QKV, block table, bias + RoPE.
  if (part != Part::Rest) {
    stages.fork(ctx);
    {
      Gemm g;  // dAO[S,C] = dY[S,C]·Wp[C,C]
      g.M = S, g.N = C, g.K = C, g.lda = C, g.ldb = C, g.ldc = C;
      if (use_fp16) {
        convert_to_half({{dY, dYh, S * C}, {Wp, Wph, C * C}}, side);
        stages.mark("to_half_dY_Wp");
      }
      if (table_on_side) {
        varlen::build_block_table(a.cu_seqlens.data, n, S, table, slots, side);
        stages.mark("table");
      }
      if (half_attn) {
        gemm_half(ctx, side_slot, side, g, dYh, Wph, dAOh);
      } else {
        gemm(ctx, side_slot, side, compute, g, opnd(dY, dYh), opnd(Wp, Wph), dAO);
      }
      stages.mark("dAO");
      if (part == Part::Whole) {
        column_sums(dY, S, C, part_proj, a.grad_proj_bias.data, side);
        stages.mark("proj_bias");
      }
    }
    if (mixed_qkv) {
      convert_to_half(X, Xh, S * C, stream);
      stages.mark("to_half_X");
      sm90::mixed_gemm_launch(mg, stream);  // also writes Wqkvh
      stages.mark("QKV_mixed");
    } else {
      Gemm g;  // QKV[S,3C] = X[S,C]·Wqkv[3C,C]ᵀ
      g.trans_b = true;
      g.M = S, g.N = C3, g.K = C, g.lda = C, g.ldb = C, g.ldc = C3;
      if (use_fp16) {
        convert_to_half({{X, Xh, S * C}, {Wqkv, Wqkvh, C3 * C}}, stream);
        stages.mark("to_half_X_Wqkv");
      }
      if (qkv16) {
        gemm_half(ctx, 0, stream, g, Xh, Wqkvh, qkvh);
      } else {
        gemm(ctx, 0, stream, compute, g, opnd(X, Xh), opnd(Wqkv, Wqkvh), qkv);
      }
      stages.mark("QKV");
    }
    if (!table_on_side) {
      varlen::build_block_table(a.cu_seqlens.data, n, S, table, slots, stream);
      stages.mark("table");
    }
    const bool vec_bias_rope = bias_rope_mode != 2 &&
                               bias_rope_vec_ok(qkv, half_attn ? static_cast<const void*>(qkvh) : qkv,
                                                a.qkv_bias.data, a.cos.data, a.sin.data, H, D);
    if (vec_bias_rope) {
      const auto go = [&](auto wide) {
        constexpr bool kWide = decltype(wide)::value;
        const int tasks = static_cast<int>(3 * H * (D / 8));  // bias_rope_vec's: 4 pairs each
        const dim3 blocks(static_cast<unsigned>(S), kWide ? static_cast<unsigned>((tasks + 255) / 256) : 1u);
        if (qkv16)
          bias_rope_vec<__half, __half, kWide><<<blocks, 256, 0, stream>>>(
              qkvh, qkvh, a.qkv_bias.data, a.cos.data, a.sin.data, static_cast<int>(H), static_cast<int>(D));
        else if (half_attn)
          bias_rope_vec<float, __half, kWide><<<blocks, 256, 0, stream>>>(
              qkv, qkvh, a.qkv_bias.data, a.cos.data, a.sin.data, static_cast<int>(H), static_cast<int>(D));
        else
          bias_rope_vec<float, float, kWide><<<blocks, 256, 0, stream>>>(
              qkv, qkv, a.qkv_bias.data, a.cos.data, a.sin.data, static_cast<int>(H), static_cast<int>(D));
      };
      if (bias_rope_wide)
        go(std::true_type{});
      else
        go(std::false_type{});
    } else {
      const int threads = 256;
      const unsigned blocks = blocks_for(S * 3 * H * (D / 2), threads);
      if (qkv16)
        bias_rope<__half, __half><<<blocks, threads, 0, stream>>>(qkvh, qkvh, a.qkv_bias.data, a.cos.data, a.sin.data,
                                                                   S, static_cast<int>(H), static_cast<int>(D));
      else if (half_attn)
        bias_rope<float, __half><<<blocks, threads, 0, stream>>>(qkv, qkvh, a.qkv_bias.data, a.cos.data, a.sin.data,
                                                                  S, static_cast<int>(H), static_cast<int>(D));
      else
        bias_rope<float, float><<<blocks, threads, 0, stream>>>(qkv, qkv, a.qkv_bias.data, a.cos.data, a.sin.data, S,
                                                                 static_cast<int>(H), static_cast<int>(D));
    }
    ATTNBWD_CUDA_CHECK_LAUNCH();
    stages.mark("bias_rope");
    stages.join(ctx);
  }  // stage 1
  if (part == Part::First) return;
  if (part == Part::Rest) {  // grad_proj_bias on the side stream, beside the attention forward
    stages.fork(ctx);
    column_sums(dY, S, C, part_proj, a.grad_proj_bias.data, side);
    stages.mark("proj_bias");
  }

  // 2. attention forward recompute.
  varlen::AttnParams p;
  p.cu = a.cu_seqlens.data;
  p.table = table;
  p.slots = slots;
  p.S = S;
  p.H = static_cast<int>(H);
  p.C = C;
  p.scaling = static_cast<float>(a.scaling);
  p.qkv = qkv;
  p.dAO = dAO;
  p.cos = a.cos.data;
  p.sin = a.sin.data;
  p.AO = AO;
  p.lse = lse;
  p.delta = delta;
  p.dqkv = dqkv;
  if (half_attn) {
    p.qkvh = qkvh;
    p.dAOh = dAOh;
    p.AOh = AOh;
  }
  if (half_dqkv) {
    p.dqkvh = dqkvh;
    p.part = part_dqkv;
  }
  varlen::attention_forward(p, products, stream, (attn_sm90 & varlen::kSm90Fwd) != 0);
  stages.mark("attn_fwd");
  if (use_fp16 && !half_attn) {
    convert_to_half(AO, AOh, S * C, stream);
    stages.mark("to_half_AO");
  }

  // 3. side: grad_proj_weight. main: attention backward.
  stages.fork(ctx);
  {
    Gemm g;  // dWp[C,C] = dYᵀ·AO
    g.trans_a = true;
    g.M = C, g.N = C, g.K = S, g.lda = C, g.ldb = C, g.ldc = C;
    gemm(ctx, side_slot, side, compute, g, opnd(dY, dYh), opnd(AO, AOh), a.grad_proj_weight.data);
    stages.mark("dWp");
  }
  varlen::attention_backward(p, products, stream, one_bwd_launch, attn_sm90 & (varlen::kSm90Dq | varlen::kSm90Dkv));
  stages.mark("attn_bwd");
  if (use_fp16 && !half_dqkv) {
    convert_to_half(dqkv, dqkvh, S * C3, stream);
    stages.mark("to_half_dQKV");
  }

  // 4. side: grad_qkv_weight. main: grad_hidden_states, grad_qkv_bias.
  stages.fork(ctx);
  {
    Gemm g;  // dWqkv[3C,C] = dQKVᵀ·X
    g.trans_a = true;
    g.M = C3, g.N = C, g.K = S, g.lda = C3, g.ldb = C, g.ldc = C;
    gemm(ctx, side_slot, side, compute, g, opnd(dqkv, dqkvh), opnd(X, Xh), a.grad_qkv_weight.data);
    stages.mark("dWqkv");
  }
  {
    Gemm g;  // dX[S,C] = dQKV[S,3C]·Wqkv[3C,C]
    g.M = S, g.N = C, g.K = C3, g.lda = C3, g.ldb = C, g.ldc = C;
    gemm(ctx, 0, stream, compute, g, opnd(dqkv, dqkvh), opnd(Wqkv, Wqkvh), a.grad_hidden_states.data);
    stages.mark("dX");
  }
  if (half_dqkv)
    sum_rows(part_dqkv, slots, C3, a.grad_qkv_bias.data, stream);
  else
    column_sums(dqkv, S, C3, part_qkv, a.grad_qkv_bias.data, stream);
  stages.mark("qkv_bias");
  stages.join(ctx);
  stages.report("vision_varlen_rope_backward S=" + std::to_string(S) + " n=" + std::to_string(n) +
                (strict ? " strict" : " default"));
}

// auto captures at S <= kGraphMaxTokens only (enqueue_part() below).
constexpr int64_t kGraphMaxTokens = 1536;

// Enqueues `part` of the op (Context::enqueue: directly or as a graph). The key: every tensor's address and extents,
// the scaling, the precision and the part (enqueue adds the ATTNBWD_* switches). Not the values in cu_seqlens: every
// kernel reads them from the device array (the block table is built there on every call, replays included), and the
// host never sizes a launch from them (grids depend on S and n only), so one graph serves any sequence boundaries at
// the same addresses.
// auto captures at S <= kGraphMaxTokens only. Measured on an H200 (twenty-first session, perf/NOTES.md; three runs
// per side, interleaved): replayed/direct 1.02-1.04x at S = 131-1176 (#8 1.033, #11 1.036, #7 1.025, #9 1.024),
// 0.94-1.00x at S >= 2048 (#6 0.963, #15 0.942 in noisy runs), where a call's ~25 launches are a few percent of
// its >= 1.1 ms and there is nothing to save.
void enqueue_part(Context& ctx, const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o,
                  cudaStream_t stream, Part part) {
  const auto key = [&] {
    return graph_key(4, a,
                     {bits_of(a.scaling), static_cast<std::uint64_t>(o.precision), static_cast<std::uint64_t>(part)});
  };
  ctx.enqueue(key, stream, [&](cudaStream_t st) { enqueue_op(ctx, s, a, o, st, part); },
              s.total_seq_len <= kGraphMaxTokens);
}

}  // namespace

void run(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream, !o.deterministic);
  enqueue_part(ctx, s, a, o, stream, Part::Whole);
  ctx.release(stream);
}

bool early_part_wanted() { return env_switch("ATTNBWD_CUDA_VARLEN_EARLY", {"auto", "off"}) == 0; }

void run_begin(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream, !o.deterministic);
  try {
    // The copy waits for the caller's earlier work only, not for the first part; it is queued after the part, so that
    // it does not open the call's span while the part's launch is still on its way (CUPTI timeline: ~16 µs at #8).
    ctx.host_copy_after(stream);
    enqueue_part(ctx, s, a, o, stream, Part::First);
    ctx.begin_host_copy(a.cu_seqlens.data, static_cast<std::size_t>(s.num_sequences + 1) * sizeof(std::int32_t));
  } catch (...) {
    ctx.release(stream);
    throw;
  }
}

void run_host_copy(std::int32_t* cu_host, std::int64_t count) {
  Context::current().finish_host_copy(cu_host, static_cast<std::size_t>(count) * sizeof(std::int32_t));
}

void run_finish(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  try {
    enqueue_part(ctx, s, a, o, stream, Part::Rest);
  } catch (...) {
    ctx.release(stream);
    throw;
  }
  ctx.release(stream);
}

void run_abandon(cudaStream_t stream) { Context::current().release(stream); }

}  // namespace attnbwd::cuda
