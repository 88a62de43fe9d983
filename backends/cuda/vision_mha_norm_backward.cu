// vision_mha_norm_backward on the CUDA fast path (spec §4): cuBLASLt projection GEMMs plus own kernels.
//
// Default with head_dim 64 (v2): the attention backward is the two fp16 kernels of
// vision_mha_norm_backward_attn.cu, each reading P once (query-major dQ and the row term, key-major
// dK/dV); they read dO from the dA GEMM's fp16 output in place and write dQKV in fp16 straight into
// the projection GEMMs' operand, with per-CTA column sums for grad_qkv_bias. The fp16 conversions of
// q/k/v, x_norm and Wqkv and the two weight-gradient GEMMs run on the side stream under the main
// stream's dA GEMM, attention kernels, dXn GEMM and LayerNorm (see enqueue_op).
//
// Otherwise (Strict, other head_dims, ATTNBWD_CUDA_MHA_ATTN=gemm), stages on the caller's stream unless
// noted (N = B·S tokens, E = H·D):
//  1. dA = dY·Wo; on the side stream, concurrently, grad_out_weight = dYᵀ·A.
//  2. head split dA [N, E] -> dO [B, H, S, D] (so every (b, h) matrix is one stride apart).
//  3. dP = dO·Vᵀ per (b, h) into the dS buffer (rows padded to a multiple of 4 floats), then the row
//     kernel: r = Σ P·dP, dS = P⊙(dP − r), in place.
//  4. dV = Pᵀ·dO, dQ = (dS·K)·scale, dK = dSᵀ·Q·scale (strided-batched, scale as the GEMM's alpha).
//  5. merge dQ|dK|dV into dQKV [N, 3E] with per-block column sums, reduced to grad_qkv_bias.
//  6. on the side stream grad_qkv_weight = dQKVᵀ·x_norm; here dXn = dQKV·Wqkv.
// Both: 7. LayerNorm backward (σ² quirk) + residual -> grad_x, with per-block column sums of dXn⊙x̂,
//     dXn and dY reduced to grad_ln_weight, grad_ln_bias, grad_out_bias.
//
// Precision: Default runs the four projection GEMMs with fp16 operands (dY, attn_output, x_norm, the
// two weights and dQKV converted to fp16 copies; fp32 accumulation and results; spec §4 measured
// all-GEMMs-fp16 to pass) and the attention products in fp16 (head_dim 64) or as TF32 GEMMs on the fp32
// tensors (CUBLAS_COMPUTE_32F_FAST_TF32); ATTNBWD_CUDA_FP32_GEMM=tf32 runs the projections in TF32 too
// (A/B; with it the attention takes the GEMM stages). Strict runs every GEMM in full fp32
// (CUBLAS_COMPUTE_32F). Element-wise math is fp32 in both; cross-block sums are added in double.
// Deterministic in both modes: no atomics, every reduction in a fixed order, one cuBLASLt algorithm per
// GEMM shape.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "check.hpp"
#include "sizes.hpp"
#include "context.hpp"
#include "convert.hpp"
#include "graph_key.hpp"
#include "cuda_backend.hpp"
#include "lt_gemm.hpp"
#include "stages.hpp"
#include "switches.hpp"
#include "vision_mha_norm_backward_attn.cuh"
#include "vision_mha_norm_backward_kernels.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;

// fp32 GEMMs (strided batches too) through lt_gemm with the mode's compute type; lt_gemm falls back
// from TF32 to full fp32 where cuBLASLt has no TF32 algorithm for an alignment (P's odd rows).
void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t compute, Gemm g, const float* A,
          const float* B, float* C, float alpha = 1.0f) {
  g.a_type = g.b_type = g.c_type = CUDA_R_32F;
  g.compute = compute;
  cuda::gemm(ctx, slot, stream, g, A, B, C, alpha);
}

constexpr int64_t kMaxEmbed = 4096;  // the LayerNorm kernel keeps a token's row in registers

}  // namespace

Support supports(const VisionMhaShape& s, const Options&) {
  const Context& ctx = Context::current();
  if (!ctx.no_code().empty()) return {ctx.no_code()};
  if (s.tokens() <= 0 || s.num_heads <= 0 || s.head_dim <= 0) return {"empty shape"};
  if (s.embed_dim != s.num_heads * s.head_dim) return {"embed_dim is not num_heads*head_dim"};
  if (s.head_dim % 4 != 0) return {"head_dim not a multiple of 4"};
  if (s.embed_dim > kMaxEmbed) return {"embed_dim above " + std::to_string(kMaxEmbed)};
  if (s.batch * s.num_heads > (int64_t{1} << 30)) return {"too many (batch, head) pairs"};
  if (s.tokens() >= (int64_t{1} << 31)) return {"too many tokens"};
  return {};
}

namespace {

// ATTNBWD_CUDA_MHA_ATTN=auto|gemm|wgmma|mma: Default's attention backward for head_dim 64 — the sm_90a
// wgmma kernels of vision_mha_norm_backward_attn_sm90.cu on sm_90 devices and the fp16 mma.sync kernels
// of vision_mha_norm_backward_attn.cu elsewhere (auto; wgmma measured 1.11-1.16× faster per call on an
// H200, 2026-12-01), the GEMM + row-kernel stages (gemm), the wgmma kernels wherever the device is sm_90
// (wgmma) or the mma.sync kernels everywhere (mma), for A/B timing.
enum class MhaAttn { Auto, Gemm, Wgmma, Mma };
MhaAttn mha_attn_switch() {
  return static_cast<MhaAttn>(env_switch("ATTNBWD_CUDA_MHA_ATTN", {"auto", "gemm", "wgmma", "mma"}));
}
// ATTNBWD_CUDA_MHA_WGMMA=auto|serial2|serial3|occ3: the wgmma kernels streaming their blocks through 2 or 3
// buffers at 2 CTAs per SM (serial2, serial3: measured within ±2 % of each other), or occ3: 2 buffers with
// 168 registers (no spills) and 75 KB of shared memory, so 3 CTAs per SM (written 2026-12-01 after ncu
// showed the kernels latency-bound at 2 warps per scheduler: "wait" and "long scoreboard" stalls, 45 %
// issue use). occ3 measured (H200, same call) 1.02-1.03x on B = 7, 10, 23, 0.997x on B = 56 and 0.92-0.94x
// on B = 1, 3 (fewer than ~3 waves of CTAs: the lower per-CTA speed is not made up by more CTAs in flight),
// so auto takes occ3 when the grid has at least 6 CTAs per SM (B >= 5 at S = 577), and also where 3 CTAs
// per SM need fewer waves than 2 (B = 2: 320 CTAs, one wave instead of two; measured 1.11x on #4, sixth
// session; B = 1 and 3 take the same number of waves either way and stay on serial3). A
// pipelined loop (block j + 1's dP product overlapping block j's element math) measured 4-6 % slower and
// was removed (perf/NOTES.md; code in commit 8241966).
// ws, wstma, wscp: the warp-specialised kernels (a producer warpgroup and two consumer warpgroups per CTA, 4 buffers
// on mbarriers; the same bits as serial2/serial3), P's tiles by TMA through a view of P as rows of 4·S floats for
// the dQ kernel and by the producer's cp.async for the dK/dV kernel (ws), by TMA for both (wstma; the dK/dV
// kernel's view rows 136 floats wide, which halves the bank conflicts of its transposed P reads) or cp.async for
// both (wscp). Measured on an H200 (ncu on #8, dQ / dK/dV µs): serial 308 / 367; ws 273 / 308; wstma 273 / 284
// (twelfth session of 2026-12-01; with 132-float rows the dK/dV kernel had taken 341). auto = wstmaw (below) where the
// kernels can run (attention_ws_unsupported_input: P 16-byte aligned, B·H·S a multiple of 4; the model's H = 16
// always is) and no split is asked for: ws measured 0.99-1.18x per call over legacy on the 16 workloads, wstma
// 1.007-1.072x over ws (geomean 1.025x); else the former rule (legacy: occ3 where the grid has ≥ 6 CTAs per SM or
// 3 per SM take fewer waves, else serial3). Forcing a ws form where it cannot run is an Error naming the switch.
// Consumers overlapping their own blocks (FA3's intra-warpgroup pipelining; the same bits) were measured and
// removed (perf/NOTES.md, twelfth session; code in commit 2c3d03f): dQ 256 µs against 247 on #8, dK/dV 291 ->
// 280 µs, whole op 0.999x and 1.007x per call. wstmaw: wstma with the dQ kernel's view
// rows 72 floats wide (2-way instead of 4-way bank conflicts on its P reads: ncu on #8 shared-load bank conflicts
// 14.2 M -> 4.7 M, the dQ kernel 277 -> 242 µs; whole op 0.98-1.04x per workload, geomean 1.011x): auto since the
// twelfth session.
struct WgmmaScheme {
  int stages, min_blocks;
  bool ws = false, tma_dq = false, tma_dkv = false, wide_dq = false;
};
int mha_wgmma_word() {
  return env_switch("ATTNBWD_CUDA_MHA_WGMMA",
                    {"auto", "serial2", "serial3", "occ3", "ws", "wstma", "wscp", "legacy", "wstmaw"});
}
WgmmaScheme mha_wgmma_switch(int64_t ctas, int sm_count, bool ws_ok) {
  const int v = mha_wgmma_word();
  switch (v) {
    case 1: return {2, 2};
    case 2: return {3, 2};
    case 3: return {2, 3};
    case 4: return {4, 1, true, true, false};
    case 5: return {4, 1, true, true, true};
    case 6: return {4, 1, true, false, false};
    case 8: return {4, 1, true, true, true, true};
    default: {
      if (v == 0 && ws_ok) return {4, 1, true, true, true, true};
      // legacy: occ3 where it takes fewer waves than 2 CTAs per SM, or the grid is deep (≥ 6 CTAs per SM).
      const int64_t slots2 = 2 * static_cast<int64_t>(sm_count), slots3 = 3 * static_cast<int64_t>(sm_count);
      const bool fewer_waves = (ctas + slots3 - 1) / slots3 < (ctas + slots2 - 1) / slots2;
      return ctas >= 6 * static_cast<int64_t>(sm_count) || fewer_waves ? WgmmaScheme{2, 3} : WgmmaScheme{3, 2};
    }
  }
}
// ATTNBWD_CUDA_MHA_SPLIT=auto|1|2: CTAs per 64-row block of the wgmma kernels (2: each streams half of the
// other sequence's blocks and the second to finish adds the first's sums). Written for grids of few blocks
// (B = 1 at S = 577: 160 CTAs with 10-block chains; split, 320 CTAs of 5-block chains in one wave at 3 per
// SM), predicted 1.2x on #10; measured (H200, 2026-12-01, two runs each) 1.02x on #10 and 0.93x on #3 (B =
// 3), so auto = 1 and 2 stays opt-in for A/B.
int mha_split_switch() { return env_switch("ATTNBWD_CUDA_MHA_SPLIT", {"auto", "1", "2"}) == 2 ? 2 : 1; }

// ATTNBWD_CUDA_MHA_COPY=auto|prows|trows|rows: the wgmma kernels' copies (3 stages): the measured ones
// (auto), or with a fixed row per thread group — the P tiles (prows), the fp16 tiles (trows) or both
// (rows) — forming row addresses once per pass instead of per chunk (ncu: the ALU pipe is the busiest).
// Measured (H200, 2026-12-01, fifth session): rows within -7..+8 % of auto per call, mixed signs over six
// workloads (a wash: the copies' integer work is not what bounds the kernels), so auto stays the default.
int mha_copy_switch() { return env_switch("ATTNBWD_CUDA_MHA_COPY", {"auto", "prows", "trows", "rows"}); }

// ATTNBWD_CUDA_MHA_PDL=auto|off|on: the wstmaw dK/dV kernel as a programmatic dependent of the dQ kernel (auto, on):
// the dQ kernel lets it start as soon as all of its CTAs run, so the dK/dV CTAs take SMs the dQ grid leaves free
// (B = 1: 80 CTAs on 132 SMs) and load their first four stages' Q, dO and P before waiting for the dQ kernel's δ; off:
// launched after the dQ kernel ends. The same bits. Measured (H200, 2026-12-02, fourteenth session): 1.005x geomean
// over the 16 workloads, #10 (B = 1) 1.049x, #4 1.020x, none slower beyond noise. on with another
// ATTNBWD_CUDA_MHA_WGMMA scheme is an Error. Returns 0 auto, 1 off, 2 on.
int mha_pdl_switch() { return env_switch("ATTNBWD_CUDA_MHA_PDL", {"auto", "off", "on"}); }

// ATTNBWD_CUDA_MHA_FUSED=auto|off|on: on runs the wstmaw dQ and dK/dV work as one launch whose CTAs take tickets in
// an order where each head's dK/dV CTAs come ATTNBWD_CUDA_MHA_LAG heads (auto: 16) after its dQ CTAs, and wait for
// the head's δ on a counter the dQ CTAs release. The same bits. Built to make the second read of P an L2 hit: at LAG 8
// it is (460 MB less from DRAM on #8) and no faster (the kernels are bound by their consumers, not DRAM; fourteenth
// session, call 2). What it does buy is one partial last wave instead of two: 1.01-1.07x per call at B = 2-14 (grids
// of 1-9 waves per kernel), 0.96-0.99x at B = 1 and B >= 23. auto = on where each kernel's grid would take more
// than one and at most nine waves of the SMs (and ATTNBWD_CUDA_MHA_PDL is not on), else off. on with another
// ATTNBWD_CUDA_MHA_WGMMA scheme, or with ATTNBWD_CUDA_MHA_PDL=on, is an Error. Returns 0 auto, 1 off, 2 on.
int mha_fused_switch() { return env_switch("ATTNBWD_CUDA_MHA_FUSED", {"auto", "off", "on"}); }
// ATTNBWD_CUDA_MHA_TAIL=auto|full|narrow: the warp-specialised kernels' last block of the streamed sequence where at
// most 16 of its rows lie inside S (S = 577: one row of ten blocks): narrow, as a 16-wide block (dP on 16 columns,
// one k step of each accumulating product: ~1/4 of a block's products and element math); full, as a whole 64-row
// block of zeros past S. The same bits (the full block adds exact zeros there). Counted: 10 → 9.25 block steps per
// consumer at S = 577 in each kernel; measured (H100, fifty-third session, perf/NOTES.md): the kernels −0.7 and −1.0 %,
// the call 1.000-1.010x at B = 1-56 (the kernels are not bound by their consumers' block work). auto = narrow where
// the warp-specialised kernels run. narrow with another scheme is an Error. Returns 0 auto, 1 full, 2 narrow.
int mha_tail_switch() { return env_switch("ATTNBWD_CUDA_MHA_TAIL", {"auto", "full", "narrow"}); }
// ATTNBWD_CUDA_MHA_PTRIM=auto|off|on: the warp-specialised kernels' P boxes (TMA) trimmed to what lies inside S (on):
// the dQ kernel's narrow last key block 20 floats wide instead of 72, its head's last ≤ 68 rows in boxes of 17 view
// rows instead of 32, the dK/dV kernel's narrow last query block in boxes of 4 view rows instead of 16 — rows and
// columns no valid output reads. The same bits. Why: ncu on #8 (H200, fifty-third session) has both kernels at 85-90 %
// of L2 throughput, and at S = 577 these boxes are ~12 % of the dQ kernel's and ~5 % of the dK/dV kernel's bytes asked
// of L2 (perf/NOTES.md). Measured (H100, fifty-third session): the dQ kernel −5.2 %, the dK/dV kernel −3.2 %, the call
// 1.009-1.023x at B = 1-56. on needs P by TMA in the kernel it trims (ws: the dQ kernel alone; wstma, wstmaw, the fused
// launch: both) and the narrow tail for the narrow blocks' boxes; on with a scheme without TMA for P is an Error. cols:
// on, and the dK/dV kernel's boxes 72 floats wide instead of 136 where the CTA's keys inside S fit them (≤ 69: the
// head's last CTA at S = 577 holds 65), ~−6 % of that kernel's bytes asked of L2 at S = 577; the same bits (the
// columns it no longer copies reach only dK/dV rows of keys past S, which are not stored); measured (H200,
// fifty-sixth session, three rounds against on): the call 1.004-1.008x at B = 1-56. cols needs the dK/dV kernel to
// take P by TMA (wstma, wstmaw, the fused launch); elsewhere it is an Error. auto = cols where the dK/dV kernel takes
// P by TMA, on where only the dQ kernel does (ws), off elsewhere. Returns 0 auto, 1 off, 2 on, 3 cols.
int mha_ptrim_switch() { return env_switch("ATTNBWD_CUDA_MHA_PTRIM", {"auto", "off", "on", "cols"}); }
// ATTNBWD_CUDA_MHA_DELTA=auto|bulk|tma: how the warp-specialised dK/dV kernel copies each stage's δ (64 floats) into
// shared memory: a plain bulk copy (cp.async.bulk) or a TMA tensor copy through a [B·H][delta_ld] map (auto). The
// same bytes, barrier and bits. Why tma: compute-sanitizer racecheck reports the bulk copy's writes against the
// consumers' reads of δ (fifty-sixth session, mha #10 and #4, one report each), though the stage's barriers order
// them, and reports nothing with tma (0 hazards at #10 and #4); tma measured 0.999-1.011x the bulk form's time per call
// (H100, #4 #8 #10 #13). tma needs the warp-specialised kernels; elsewhere it is an Error. Returns 0 auto, 1 bulk,
// 2 tma.
int mha_delta_switch() { return env_switch("ATTNBWD_CUDA_MHA_DELTA", {"auto", "bulk", "tma"}); }
int64_t mha_lag_switch() {
  constexpr int64_t lags[] = {16, 4, 8, 12, 16, 24, 32, 48};
  return lags[env_switch("ATTNBWD_CUDA_MHA_LAG", {"auto", "4", "8", "12", "16", "24", "32", "48"})];
}

// ATTNBWD_CUDA_MHA_CONVERT=auto|joint|late: the fp16 path's conversions of the inputs. joint (auto): dY, A and Wo in
// one launch on the main stream before dA, q, k, v on the side stream after it, x_norm and Wqkv on the side stream
// after grad_out_weight. late: the side stream starts with q, k, v at the op's start, the main stream converts only
// dY and Wo before dA (A is read by grad_out_weight alone), and A, x_norm and Wqkv go in one launch on the side
// stream under the attention kernels. Predicted ~20 µs less on #8's main stream before dA; measured 0.992x per call
// (#8 0.976x: q, k, v's conversion then competes with dY's for DRAM from the start). Kept opt-in.
bool mha_late_a_switch() { return env_switch("ATTNBWD_CUDA_MHA_CONVERT", {"auto", "joint", "late"}) == 2; }

// Where the fp16 attention kernels run on a device other than sm_90 (the mma.sync kernels), asking for the sm_90a
// wgmma kernels or one of their forms is an Error naming the switch, as forcing a kernel that cannot take the call
// is everywhere: ATTNBWD_CUDA_MHA_ATTN=wgmma, and ATTNBWD_CUDA_MHA_WGMMA, _COPY other than auto, _SPLIT=2, _PDL=on,
// _FUSED=on (their other values, which ask for nothing these kernels lack, are read and checked only).
void refuse_wgmma_switches(int cc, MhaAttn attn) {
  const std::string here = "the sm_90a wgmma attention kernels run on sm_90 devices only (this one: compute "
                           "capability " + std::to_string(cc) + ")";
  if (attn == MhaAttn::Wgmma) throw Error("ATTNBWD_CUDA_MHA_ATTN", "wgmma: " + here);
  if (mha_wgmma_word() != 0) throw Error("ATTNBWD_CUDA_MHA_WGMMA", here);
  if (mha_copy_switch() != 0) throw Error("ATTNBWD_CUDA_MHA_COPY", here);
  if (mha_split_switch() == 2) throw Error("ATTNBWD_CUDA_MHA_SPLIT", here);
  if (mha_pdl_switch() == 2) throw Error("ATTNBWD_CUDA_MHA_PDL", here);
  if (mha_fused_switch() == 2) throw Error("ATTNBWD_CUDA_MHA_FUSED", here);
  if (mha_tail_switch() == 2) throw Error("ATTNBWD_CUDA_MHA_TAIL", here);
  if (mha_ptrim_switch() >= 2) throw Error("ATTNBWD_CUDA_MHA_PTRIM", here);
  if (mha_delta_switch() == 2) throw Error("ATTNBWD_CUDA_MHA_DELTA", here);
  (void)mha_lag_switch();  // checked
}

// Whether the fp16 attention kernels run: Default with fp16 projections (the dA GEMM writes the kernels'
// fp16 dO, they write the fp16 dQKV operand), head_dim 64, a grid of at most 2³¹ − 1 CTAs.
bool fp16_attention(const VisionMhaShape& s, bool use_fp16, MhaAttn attn) {
  return attn != MhaAttn::Gemm && use_fp16 && s.head_dim == mha::kAttnHeadDim &&
         mha::attn_blocks(s.seq_len) * s.batch * s.num_heads < (int64_t{1} << 31);
}

// Scratch pieces carved from one allocation, each at a 256-byte boundary.
struct Carve {
  std::size_t bytes = 0;
  std::size_t take(int64_t n, std::size_t elem) {
    const std::size_t at = bytes;
    bytes += (static_cast<std::size_t>(n) * elem + 255) / 256 * 256;
    return at;
  }
};

// ATTNBWD_CUDA_MHA_DWO_SMS and ATTNBWD_CUDA_MHA_DWQKV_SMS = auto|off|N: the SM counts cuBLASLt chooses and sizes the
// side stream's grad_out_weight (beside the attention kernels) and grad_qkv_weight (beside dXn and the LayerNorm)
// GEMMs for (Gemm::sm_target): a cuBLASLt GEMM on sm_90 is a persistent grid of one CTA per SM that holds every SM
// until it ends, so the main stream's kernels beside it wait (perf/NOTES.md, thirty-second and thirty-third sessions).
// off: every SM. auto, on sm_90 with the fp16 attention kernels (measured on an H200, thirty-third session, two
// interleaved rounds over the 16 workloads; perf/NOTES.md): below kMhaDwWideTokens tokens grad_out_weight on 66 of 132
// SMs and grad_qkv_weight on all (1.00-1.024x at B = 1-23; grad_qkv_weight on 66 lost 1-3 % everywhere), from there
// both on 100 (1.021-1.031x at B = 28-56); elsewhere off.
constexpr int64_t kMhaDwWideTokens = 16000;  // B = 28 at S = 577
struct MhaDwSms {
  int out = 0, qkv = 0;
};
MhaDwSms mha_dw_sm_targets(const Context& ctx, int64_t tokens, bool fp16_attn) {
  const int sms = ctx.sm_count();
  const bool measured = fp16_attn && ctx.cc() == 90;
  const bool wide = tokens >= kMhaDwWideTokens;
  const int out = measured ? sms_of_132(sms, wide ? 100 : 66) : 0;
  const int qkv = measured && wide ? sms_of_132(sms, 100) : 0;
  return {sm_target_switch("ATTNBWD_CUDA_MHA_DWO_SMS", sms, out), sm_target_switch("ATTNBWD_CUDA_MHA_DWQKV_SMS", sms, qkv)};
}

// The whole op on `stream` (and the side stream, joined before returning).
void enqueue_op(Context& ctx, const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream) {
  const cublasComputeType_t compute =
      o.precision == Precision::Strict ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  const int64_t B = s.batch, S = s.seq_len, E = s.embed_dim, H = s.num_heads, D = s.head_dim, N = s.tokens();
  const int64_t E3 = 3 * E, BH = B * H, ld = round_up(S, 4);
  const int64_t tpb = mha::tokens_per_block(N, ctx.sm_count()), chunks = (N + tpb - 1) / tpb;
  const bool use_fp16 = o.precision != Precision::Strict && fp16_gemms();
  const MhaAttn attn = mha_attn_switch();
  const bool fp16_attn = fp16_attention(s, use_fp16, attn);
  const bool late_a = fp16_attn && mha_late_a_switch();  // read before anything is enqueued
  // SM count targets of the side stream's weight-gradient GEMMs (Gemm::sm_target, mha_dw_sm_targets), read before
  // anything is enqueued.
  const MhaDwSms dw_sms = mha_dw_sm_targets(ctx, s.batch * s.seq_len, fp16_attn);
  const int64_t attn_chunks = B * mha::attn_blocks(S);  // partial rows of the fp16 attention kernels
  // The sm_90a wgmma attention kernels: their scheme, copies and split (split blocks, only ever asked for,
  // need occ3 or serial3 with the default copies).
  const bool wgmma_attn = fp16_attn && attn != MhaAttn::Mma && ctx.cc() == 90;
  if (fp16_attn && ctx.cc() != 90) refuse_wgmma_switches(ctx.cc(), attn);  // the mma.sync kernels run here
  const int64_t attn_ctas = BH * mha::attn_blocks(S);
  int split = 1, copy = 0;
  WgmmaScheme wgmma{3, 2};
  bool pdl = false, fused = false, narrow_tail = false;
  int trim_p = 0;  // AttnParams::trim_p: 0 whole boxes, 1 trimmed, 2 trimmed and the dK/dV boxes' columns cut
  bool delta_tma = false;
  int64_t lag = 0;
  if (wgmma_attn) {
    split = mha_split_switch();
    const std::string ws_why = mha::attention_ws_unsupported_input(B, S, static_cast<int>(H), a.attn_weights.data);
    copy = mha_copy_switch();  // the copy variants are the serial kernels': auto takes ws only with the default
    wgmma = mha_wgmma_switch(attn_ctas * split, ctx.sm_count(), ws_why.empty() && split == 1 && copy == 0);
    if (wgmma.ws && !ws_why.empty())
      throw Error("ATTNBWD_CUDA_MHA_WGMMA", "the warp-specialised kernels cannot run here: " + ws_why);
    const bool wstmaw = wgmma.ws && wgmma.wide_dq;
    const int pdl_word = mha_pdl_switch();
    if (pdl_word == 2 && !wstmaw)
      throw Error("ATTNBWD_CUDA_MHA_PDL", "on is built for the wstmaw kernels (ATTNBWD_CUDA_MHA_WGMMA auto where they "
                                          "run, or wstmaw)");
    const int fused_word = mha_fused_switch();
    const int64_t kernel_ctas = BH * mha::ws_ctas_per_head(S);
    fused = fused_word == 2 || (fused_word == 0 && wstmaw && pdl_word != 2 && kernel_ctas > ctx.sm_count() &&
                                kernel_ctas <= 9 * static_cast<int64_t>(ctx.sm_count()));
    const int64_t lag_asked = mha_lag_switch();  // read (and checked) whether or not the launch is fused
    lag = fused ? lag_asked : 0;
    if (fused && !wstmaw)
      throw Error("ATTNBWD_CUDA_MHA_FUSED", "on is built for the wstmaw kernels (ATTNBWD_CUDA_MHA_WGMMA auto where "
                                            "they run, or wstmaw)");
    if (fused && pdl_word == 2)
      throw Error("ATTNBWD_CUDA_MHA_FUSED", "on is one launch: ATTNBWD_CUDA_MHA_PDL=on does not apply");
    pdl = wstmaw && pdl_word != 1 && !fused;
    const int tail_word = mha_tail_switch();
    if (tail_word == 2 && !wgmma.ws)
      throw Error("ATTNBWD_CUDA_MHA_TAIL", "narrow is built for the warp-specialised kernels (ATTNBWD_CUDA_MHA_WGMMA "
                                           "auto where they run, ws, wstma, wscp or wstmaw)");
    narrow_tail = wgmma.ws && tail_word != 1;
    const int ptrim_word = mha_ptrim_switch();
    const bool p_by_tma = wgmma.ws && (wgmma.tma_dq || wgmma.tma_dkv);  // the boxes PTRIM trims exist
    if (ptrim_word == 2 && !p_by_tma)
      throw Error("ATTNBWD_CUDA_MHA_PTRIM", "on is built for the warp-specialised kernels that take P by TMA "
                                            "(ATTNBWD_CUDA_MHA_WGMMA auto where they run, wstma, ws or wstmaw)");
    if (ptrim_word == 3 && !(wgmma.ws && wgmma.tma_dkv))
      throw Error("ATTNBWD_CUDA_MHA_PTRIM", "cols is built for the warp-specialised dK/dV kernel that takes P by TMA "
                                            "(ATTNBWD_CUDA_MHA_WGMMA auto where it runs, wstma or wstmaw)");
    // auto: cols where the dK/dV kernel takes P by TMA (wstma, wstmaw, the fused launch), else on (ws)
    trim_p = !p_by_tma || ptrim_word == 1 ? 0 : ptrim_word == 3 || (ptrim_word == 0 && wgmma.tma_dkv) ? 2 : 1;
    const int delta_word = mha_delta_switch();
    delta_tma = wgmma.ws && delta_word != 1;
    if (delta_word == 2 && !wgmma.ws)
      throw Error("ATTNBWD_CUDA_MHA_DELTA", "tma is built for the warp-specialised dK/dV kernel "
                                            "(ATTNBWD_CUDA_MHA_WGMMA auto where it runs, ws, wstma, wscp or wstmaw)");
    if (split == 2 && !(copy == 0 && ((wgmma.stages == 2 && wgmma.min_blocks == 3) ||
                                      (wgmma.stages == 3 && wgmma.min_blocks == 2))))
      throw Error("ATTNBWD_CUDA_MHA_SPLIT", "split blocks run with ATTNBWD_CUDA_MHA_WGMMA occ3 or serial3 and "
                                            "ATTNBWD_CUDA_MHA_COPY auto only");
  }

  // Scratch (slot 0). GEMM attention: dA (later dXn) | dO | dQh | dKh | dVh | dS (later dQKV) | partials
  // of the qkv bias and of the LayerNorm sums. fp16 attention: dXn | δ | partials. fp16 copies (Default
  // with fp16 projections): dY | A | x_norm | dQKV | Wo | Wqkv, and with fp16 attention dA | q | k | v.
  Carve c;
  const std::size_t f4 = sizeof(float), h2 = sizeof(__half);
  const std::size_t o_dA = c.take(N * E, f4);
  const std::size_t o_dO = fp16_attn ? 0 : c.take(N * E, f4);
  const std::size_t o_dQh = fp16_attn ? 0 : c.take(N * E, f4);
  const std::size_t o_dKh = fp16_attn ? 0 : c.take(N * E, f4);
  const std::size_t o_dVh = fp16_attn ? 0 : c.take(N * E, f4);
  const std::size_t o_dS = fp16_attn ? 0 : c.take(std::max(BH * S * ld, N * E3), f4);
  const int64_t delta_ld = round_up(S, mha::kAttnBlock);  // δ rows padded to whole blocks (ws kernels)
  const std::size_t o_delta = fp16_attn ? c.take(BH * delta_ld, f4) : 0;
  const std::size_t o_pqkv = c.take((fp16_attn ? attn_chunks : chunks) * E3, f4);
  const std::size_t o_pln = c.take(mha::layer_norm_max_blocks(N, ctx.sm_count()) * E3, f4);
  const std::size_t o_dYh = use_fp16 ? c.take(N * E, h2) : 0;
  const std::size_t o_Ah = use_fp16 ? c.take(N * E, h2) : 0;
  const std::size_t o_Xnh = use_fp16 ? c.take(N * E, h2) : 0;
  const std::size_t o_dQKVh = use_fp16 ? c.take(N * E3, h2) : 0;
  const std::size_t o_Woh = use_fp16 ? c.take(E * E, h2) : 0;
  const std::size_t o_Wqkvh = use_fp16 ? c.take(E3 * E, h2) : 0;
  const std::size_t o_dAh = fp16_attn ? c.take(N * E, h2) : 0;
  const std::size_t o_qh = fp16_attn ? c.take(3 * N * E, h2) : 0;  // q | k | v, each [B,H,S,D]
  const std::size_t o_split = split == 2 ? c.take(attn_ctas * mha::kSplitBlockFloats, f4) : 0;
  char* base = static_cast<char*>(ctx.scratch(0, c.bytes, stream));
  const auto f32 = [&](std::size_t at) { return reinterpret_cast<float*>(base + at); };
  const auto f16 = [&](std::size_t at) { return reinterpret_cast<__half*>(base + at); };
  float* dA = f32(o_dA);
  float* dXn = dA;  // dA is dead after the head split (GEMM attention) or never used (fp16 attention)
  float* part_qkv = f32(o_pqkv);
  float* part_ln = f32(o_pln);
  __half* dYh = f16(o_dYh);
  __half* Ah = f16(o_Ah);
  __half* Xnh = f16(o_Xnh);
  __half* dQKVh = f16(o_dQKVh);
  __half* Woh = f16(o_Woh);
  __half* Wqkvh = f16(o_Wqkvh);

  const float* dY = a.grad_output.data;
  const float* P = a.attn_weights.data;
  const float scale = static_cast<float>(a.scale);
  const int count = static_cast<int>(BH);

  StageTimer stages(stream);  // with it on, the side-stream work runs on `stream`
  const cudaStream_t side = stages.side_or_main(ctx.side_stream());
  const auto op = [&](const float* x, const __half* h) { return operand(use_fp16, x, h); };
  // The GEMMs, each on the stream it is given.
  const auto dW_out = [&](cudaStream_t st) {  // grad_out_weight = dYᵀ·A
    Gemm g;
    g.trans_a = true;
    g.M = E, g.N = E, g.K = N, g.lda = E, g.ldb = E, g.ldc = E;
    if (st != stream) g.sm_target = dw_sms.out;
    gemm(ctx, st == stream ? 0 : 1, st, compute, g, op(dY, dYh), op(a.attn_output.data, Ah), a.grad_out_weight.data);
    stages.mark("dW_out");
  };
  const float* dqkv_fp32 = nullptr;  // dQKV in fp32 (GEMM attention only; the fp16 path has dQKVh alone)
  const auto dW_qkv = [&](cudaStream_t st) {  // grad_qkv_weight = dQKVᵀ·x_norm
    Gemm g;
    g.trans_a = true;
    g.M = E3, g.N = E, g.K = N, g.lda = E3, g.ldb = E, g.ldc = E;
    if (st != stream) g.sm_target = dw_sms.qkv;
    gemm(ctx, st == stream ? 0 : 1, st, compute, g, op(dqkv_fp32, dQKVh), op(a.x_norm.data, Xnh),
         a.grad_qkv_weight.data);
    stages.mark("dW_qkv");
  };
  const auto dXn_gemm = [&] {  // dXn = dQKV·Wqkv
    Gemm g;
    g.M = N, g.N = E, g.K = E3, g.lda = E3, g.ldb = E, g.ldc = E;
    gemm(ctx, 0, stream, compute, g, op(dqkv_fp32, dQKVh), op(a.qkv_weight.data, Wqkvh), dXn);
    stages.mark("dXn");
  };
  if (fp16_attn) {
    // Main stream: dY, A, Wo to fp16, dA (fp16: the kernels' dO, read in place, head h at columns h·D),
    // the attention kernels (dQKV in fp16 + column sums), dXn, LayerNorm. Side stream, in the gaps: q, k,
    // v to fp16 (joined before the attention), then grad_out_weight and x_norm, Wqkv to fp16 (joined before
    // dXn) under the attention kernels, then the qkv bias and grad_qkv_weight under dXn and LayerNorm.
    __half* dAh = f16(o_dAh);
    __half* qh = f16(o_qh);
    const auto convert_qkv = [&](cudaStream_t st) {  // q | k | V·kAttnDsScale (exact), each [B,H,S,D]
      convert_to_half({{a.q.data, qh, N * E},
                       {a.k.data, qh + N * E, N * E},
                       {a.v.data, qh + 2 * N * E, N * E, mha::kAttnDsScale}},
                      st);
    };
    // Conversions of several tensors share a launch (small B pays per launch).
    if (late_a) {  // the side stream from the op's start; A (read by grad_out_weight only) converted later there
      stages.fork(ctx);
      convert_qkv(side);
      stages.mark("to_half_qkv");
      convert_to_half({{dY, dYh, N * E}, {a.out_weight.data, Woh, E * E}}, stream);
      stages.mark("to_half_dY_Wo");
    } else {
      convert_to_half({{dY, dYh, N * E}, {a.attn_output.data, Ah, N * E}, {a.out_weight.data, Woh, E * E}}, stream);
      stages.mark("to_half_dY_A_Wo");
      stages.fork(ctx);  // side: after dYh and Ah exist
      convert_qkv(side);
      stages.mark("to_half_qkv");
    }
    {
      Gemm g;
      g.M = N, g.N = E, g.K = E, g.lda = E, g.ldb = E, g.ldc = E;
      gemm_half(ctx, 0, stream, g, dYh, Woh, dAh);
      stages.mark("dA");
    }
    stages.join(ctx);  // main: after q, k, v are fp16
    if (late_a) {
      stages.fork(ctx);  // side: after dYh exists
      convert_to_half(
          {{a.attn_output.data, Ah, N * E}, {a.x_norm.data, Xnh, N * E}, {a.qkv_weight.data, Wqkvh, E3 * E}}, side);
      stages.mark("to_half_A_Xn_Wqkv");
      dW_out(side);
    } else {
      dW_out(side);
      convert_to_half({{a.x_norm.data, Xnh, N * E}, {a.qkv_weight.data, Wqkvh, E3 * E}}, side);
      stages.mark("to_half_Xn_Wqkv");
    }
    mha::AttnParams p;
    p.B = B, p.S = S, p.H = static_cast<int>(H), p.scale = scale;
    p.P = P, p.dO = dAh, p.q = qh, p.k = qh + N * E, p.v = qh + 2 * N * E;
    p.delta = f32(o_delta), p.delta_ld = delta_ld, p.dqkv = dQKVh, p.partial = part_qkv;
    if (split == 2) p.split_ws = f32(o_split), p.split_count = ctx.counters(2 * attn_ctas, stream);
    if (fused) p.order = ctx.counters(1 + 2 * BH, stream), p.lag = lag;
    p.narrow_tail = narrow_tail ? 1 : 0;
    p.trim_p = trim_p;
    p.delta_tma = delta_tma ? 1 : 0;
    if (wgmma_attn && wgmma.ws) {
      mha::attention_backward_sm90_ws(p, wgmma.tma_dq, wgmma.tma_dkv, stream, wgmma.wide_dq, pdl, fused);
    } else if (wgmma_attn) {
      mha::attention_backward_sm90(p, wgmma.stages, wgmma.min_blocks, copy, split, stream);
    } else {
      mha::attention_backward(p, stream);
    }
    stages.mark("attention");
    stages.join(ctx);  // main: after x_norm and Wqkv are fp16 (and grad_out_weight)
    stages.fork(ctx);  // side: after dQKV and the column-sum partials exist
    // grad_qkv_bias on the side stream, off the main stream's chain (small B is launch-bound).
    mha::sum_partials(part_qkv, attn_chunks, E3, E3, a.grad_qkv_bias.data, nullptr, nullptr, side);
    stages.mark("qkv_bias");
    dW_qkv(side);
    dXn_gemm();
  } else {
    if (use_fp16) {  // before the fork: the side stream's first GEMM reads dY and A
      convert_to_half({{dY, dYh, N * E}, {a.attn_output.data, Ah, N * E}, {a.out_weight.data, Woh, E * E}}, stream);
      stages.mark("to_half_dY_A_Wo");
    }
    // 1. grad_out_weight (side stream) and dA.
    stages.fork(ctx);
    dW_out(side);
    float* dO = f32(o_dO);
    float* dQh = f32(o_dQh);
    float* dKh = f32(o_dKh);
    float* dVh = f32(o_dVh);
    float* dS = f32(o_dS);
    float* dQKV = dS;  // dS is dead after the dQ and dK GEMMs
    {
      Gemm g;
      g.M = N, g.N = E, g.K = E, g.lda = E, g.ldb = E, g.ldc = E;
      gemm(ctx, 0, stream, compute, g, op(dY, dYh), op(a.out_weight.data, Woh), dA);
      stages.mark("dA");
    }
    // 2. head split.
    mha::head_split(dA, dO, B, S, H, D, stream);
    stages.mark("head_split");
    // 3. dP = dO·Vᵀ, then dS in place.
    {
      Gemm g;
      g.trans_b = true;
      g.M = S, g.N = S, g.K = D, g.lda = D, g.ldb = D, g.ldc = ld, g.count = count, g.stride_a = S * D,
      g.stride_b = S * D, g.stride_c = S * ld;
      gemm(ctx, 0, stream, compute, g, dO, a.v.data, dS);
    }
    stages.mark("dP");
    mha::softmax_backward(P, dS, BH * S, S, ld, stream);
    stages.mark("dS");
    // 4. dV = Pᵀ·dO, dQ = (dS·K)·scale, dK = dSᵀ·Q·scale.
    {
      Gemm g;
      g.trans_a = true;
      g.M = S, g.N = D, g.K = S, g.lda = S, g.ldb = D, g.ldc = D, g.count = count, g.stride_a = S * S,
      g.stride_b = S * D, g.stride_c = S * D;
      gemm(ctx, 0, stream, compute, g, P, dO, dVh);
      stages.mark("dV");
    }
    {
      Gemm g;
      g.M = S, g.N = D, g.K = S, g.lda = ld, g.ldb = D, g.ldc = D, g.count = count, g.stride_a = S * ld,
      g.stride_b = S * D, g.stride_c = S * D;
      gemm(ctx, 0, stream, compute, g, dS, a.k.data, dQh, scale);
      g.trans_a = true;
      gemm(ctx, 0, stream, compute, g, dS, a.q.data, dKh, scale);
      stages.mark("dQ_dK");
    }
    // 5. merge + grad_qkv_bias.
    mha::merge_heads(dQh, dKh, dVh, dQKV, part_qkv, B, S, H, D, tpb, stream);
    mha::sum_partials(part_qkv, chunks, E3, E3, a.grad_qkv_bias.data, nullptr, nullptr, stream);
    stages.mark("merge_bias");
    if (use_fp16) {
      convert_to_half({{dQKV, dQKVh, N * E3}, {a.x_norm.data, Xnh, N * E}, {a.qkv_weight.data, Wqkvh, E3 * E}},
                      stream);
      stages.mark("to_half_dQKV_Xn_Wqkv");
    }
    dqkv_fp32 = dQKV;
    // 6. grad_qkv_weight (side stream, after dQKV exists) and dXn.
    stages.fork(ctx);
    dW_qkv(side);
    dXn_gemm();
  }
  // 7. LayerNorm backward + residual, then the three token sums.
  const int64_t ln_blocks =
      mha::layer_norm_backward(dXn, a.x.data, a.x_mean.data, a.x_var.data, a.ln_weight.data, dY, a.grad_x.data,
                               part_ln, N, E, static_cast<float>(a.norm_eps), ctx.sm_count(), stream);
  mha::sum_partials(part_ln, ln_blocks, E3, E, a.grad_ln_weight.data, a.grad_ln_bias.data, a.grad_out_bias.data,
                    stream);
  stages.mark("layer_norm_sums");
  stages.join(ctx);
  stages.report("vision_mha_norm_backward B=" + std::to_string(B) + " S=" + std::to_string(S) +
                (o.precision == Precision::Strict ? " strict" : " default"));
}

}  // namespace

void run(const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream, !o.deterministic);
  const auto key = [&] {
    // The ATTNBWD_* switches: enqueue adds them all.
    return graph_key(3, a, {bits_of(a.scale), bits_of(a.norm_eps), static_cast<std::uint64_t>(o.precision)});
  };
  ctx.enqueue(key, stream, [&](cudaStream_t st) { enqueue_op(ctx, s, a, o, st); });
  ctx.release(stream);
}

}  // namespace attnbwd::cuda
