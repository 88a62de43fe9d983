// out_proj_backward on the CUDA fast path (spec §2).
//   grad_weight = dYᵀ·X       [hidden, hidden], summed over T = B·S tokens
//   G = dY·W, grad_attn_output[b,h,s,d] = G[b·S+s, h·D+d]
// bf16 operands, fp32 accumulation, one rounding: what the reference's fp32 GEMMs on upcast operands
// give (bf16 products are exact in fp32).
//
// Paths, chosen per call:
//   sm_90 (Hopper) and a shape the kernel takes: linear_backward_sm90.cu, both GEMMs in one
//     persistent TMA + wgmma launch, dX written in the head-split layout by its epilogue;
//   otherwise (sm_100 until it has its own kernel, odd shapes or alignments): two cuBLASLt GEMMs
//     running concurrently (dW on the side stream), then a head-split copy of G (dX written into the heads by one
//     pointer-array batch instead measured slower: perf/NOTES.md, forty-fifth session).
// ATTNBWD_CUDA_OUT_PROJ=sm90|cublaslt|hybrid|thin (environment, read per call) forces one path, for A/B timing
// and tests (hybrid: dW by cuBLASLt on the side stream, dX alone by the kernel; thin: T ≤ 256, both GEMMs by the
// thin-T kernel of linear_thin_sm90.cu, which streams W in and dW out together; measured on an H200 at T = 256,
// 21.3 µs per call against auto's 17.7 (its fourth version, 2026-12-02), so never chosen by auto); forcing sm90, hybrid or thin where the kernel
// cannot run is an Error naming the variable.
// ATTNBWD_CUDA_OUT_PROJ_DX_TILE=auto|256|128 (dx_tile below): the kernel's dX tile columns; auto takes 128 where dX
// would be split and the model puts them ahead (T = 256 and 512 at out_proj's sizes: perf/NOTES.md, thirtieth session).
// ATTNBWD_CUDA_OUT_PROJ_SPLITK=auto|cluster|last|coop: how the kernel sums a split-K over dX (small T): by the
// CTAs of a cluster together, by the last CTA of each tile to arrive, or by the tile's CTAs together in a
// cooperative launch (no clusters: one CTA per SM); auto: the cluster's plan, or the cooperative one where the
// planner's model puts it clearly ahead (sm90::linear_backward_auto_plan). Auto takes the kernel
// for plans without split-K and for cluster or cooperative plans (2 or 4 splits); last-arrival split plans go to the
// cuBLASLt pair unless sm90 is forced (measured on an H200, 2026-12-01: the last-arrival reduction loses
// to the pair at T = 512 and 256). The hybrid is never chosen by auto since the twenty-third session
// (2026-12-03): by the CUPTI span of the call's kernels (spec §7) the kernel alone wins at T = 256.
#include <cuda_bf16.h>

#include <cstdint>
#include <optional>
#include <string>

#include "check.hpp"
#include "context.hpp"
#include "head_split.hpp"
#include "graph_key.hpp"
#include "cuda_backend.hpp"
#include "lt_gemm.hpp"
#include "linear_backward_sm90.hpp"
#include "linear_thin_sm90.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {

Support supports(const OutProjShape&, const Options&) {
  const Context& ctx = Context::current();
  if (!ctx.no_code().empty()) return {ctx.no_code()};
  return {};
}

namespace {

enum class Path { Auto, Sm90, CublasLt, Hybrid, Thin };

Path forced_path() {
  return static_cast<Path>(env_switch("ATTNBWD_CUDA_OUT_PROJ", {"auto", "sm90", "cublaslt", "hybrid", "thin"}));
}

// The reduction asked for by ATTNBWD_CUDA_OUT_PROJ_SPLITK; auto (empty) decides per plan in run_sm90.
std::optional<sm90::SplitReduce> split_reduce() {
  switch (env_switch("ATTNBWD_CUDA_OUT_PROJ_SPLITK", {"auto", "cluster", "last", "coop"})) {
    case 1: return sm90::SplitReduce::Cluster;
    case 2: return sm90::SplitReduce::LastArrival;
    case 3:
      if (!sm90::cooperative_launch_supported())
        throw Error("ATTNBWD_CUDA_OUT_PROJ_SPLITK", "coop asked for on a device without cooperative launches");
      return sm90::SplitReduce::CoResident;
    default: return std::nullopt;
  }
}

// ATTNBWD_CUDA_OUT_PROJ_DX_TILE=auto|256|128: the kernel's dX tile columns. auto: the auto plan's choice
// (sm90::linear_backward_auto_plan; 256 where ATTNBWD_CUDA_OUT_PROJ_SPLITK is set); 128 only with the cluster or
// cooperative reduction (an Error naming the variable with SPLITK=last). 0 for auto.
int dx_tile() {
  switch (env_switch("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", {"auto", "256", "128"})) {
    case 1: return 256;
    case 2: return 128;
    default: return 0;
  }
}

// The problem as the sm_90a kernel sees it.
sm90::LinearBackward kernel_problem(const OutProjShape& s, const OutProjArgs& a) {
  sm90::LinearBackward p;
  p.grad_output = a.grad_output.data, p.input = a.reshaped.data, p.weight = a.weight.data;
  p.grad_input = a.grad_attn_output.data, p.grad_weight = a.grad_weight.data;
  p.out_features = p.in_features = s.hidden();
  p.batch = s.batch, p.seq_len = s.seq_len, p.heads = s.num_heads, p.head_dim = s.head_dim;
  return p;
}

// dW = dYᵀ·X by cuBLASLt on `st`.
void dw_cublaslt(Context& ctx, int slot, cudaStream_t st, const OutProjShape& s, const OutProjArgs& a) {
  const std::int64_t T = s.tokens(), Hd = s.hidden();
  Gemm dw;
  dw.trans_a = true;  // dYᵀ: dY is [T, Hd]
  dw.M = Hd, dw.N = Hd, dw.K = T, dw.lda = Hd, dw.ldb = Hd, dw.ldc = Hd;
  gemm(ctx, slot, st, dw, a.grad_output.data, a.reshaped.data, a.grad_weight.data);
}

// Whether the sm_90a kernel can take problem p on this device; where it cannot and a path that needs it
// was forced (ATTNBWD_CUDA_OUT_PROJ=sm90|hybrid), an Error naming the variable.
bool kernel_takes(const Context& ctx, const sm90::LinearBackward& p, bool forced) {
  const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_backward_unsupported(p);
  if (why.empty()) return true;
  if (forced) throw Error("ATTNBWD_CUDA_OUT_PROJ", "sm90 kernel cannot take this call: " + why);
  return false;
}

// Hybrid (small T): dW by cuBLASLt on the side stream and, concurrently, dX alone by the sm_90a kernel on
// at most half the SMs (split-K summed by clusters), written in the head-split layout by its epilogue:
// the pair without its layout copy. p: kernel_problem(s, a), which the kernel takes.
void run_hybrid(Context& ctx, const OutProjShape& s, const OutProjArgs& a, const sm90::LinearBackward& p,
                cudaStream_t stream) {
  const sm90::LinearBackwardPlan plan = sm90::linear_backward_plan_dx_only(p, ctx.sm_count(), ctx.sm_count() / 2);
  void* ws = plan.workspace_bytes ? ctx.scratch(0, plan.workspace_bytes, stream) : nullptr;
  unsigned* counters = ctx.counters(plan.counters, stream);
  ctx.fork(stream);
  dw_cublaslt(ctx, 1, ctx.side_stream(), s, a);
  sm90::linear_backward_launch(p, plan, ws, counters, stream);
  ctx.join(stream);
}

// The hand-tuned kernel for both GEMMs, when the device and the problem suit it. Returns false to fall back.
bool run_sm90(Context& ctx, const OutProjShape& s, const OutProjArgs& a, cudaStream_t stream, bool forced,
              std::optional<sm90::SplitReduce> reduce) {
  const sm90::LinearBackward p = kernel_problem(s, a);
  if (!kernel_takes(ctx, p, forced)) return false;
  const int tile = dx_tile();
  if (tile == 128 && reduce && *reduce == sm90::SplitReduce::LastArrival)
    throw Error("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", "128-column dX tiles need ATTNBWD_CUDA_OUT_PROJ_SPLITK=auto, cluster or coop");
  const sm90::LinearBackwardPlan plan = reduce ? sm90::linear_backward_plan(p, ctx.sm_count(), *reduce, tile ? tile : 256)
                                               : sm90::linear_backward_auto_plan(p, ctx.sm_count(), tile);
  // Measured (perf/NOTES.md, H200): without split-K the kernel is at par with the cuBLASLt pair or
  // ahead; with split-K summed by clusters it is the fastest path at T = 512 and T = 256 by the spec's
  // measure (the CUPTI span of the call's GPU work, twenty-third session: T = 256 17.9 µs, against the
  // hybrid's 20.0-26.0 and the pair's 21.5-29.8, whose second stream and extra launches open gaps between
  // kernels; CUDA events around the call had ranked the hybrid first, 17.6 against 20.2, as they count
  // the launch gap before the first kernel instead); the last-arrival reduction lost to the pair (22.7 vs
  // 18.5 µs at T = 256, events), so such plans go to the pair.
  if (!forced && plan.splits_dx > 1 && plan.cluster == 1 && !plan.coop) return false;
  void* ws = plan.workspace_bytes ? ctx.scratch(0, plan.workspace_bytes, stream) : nullptr;
  sm90::linear_backward_launch(p, plan, ws, ctx.counters(plan.counters, stream), stream);
  return true;
}

// Both GEMMs by the thin-T kernel (forced: an Error where it cannot take the call).
void run_thin(Context& ctx, const OutProjShape& s, const OutProjArgs& a, cudaStream_t stream) {
  const sm90::LinearBackward p = kernel_problem(s, a);
  const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_thin_unsupported(p);
  if (!why.empty()) throw Error("ATTNBWD_CUDA_OUT_PROJ", "thin kernel cannot take this call: " + why);
  const sm90::ThinPlan plan = sm90::linear_thin_plan(p, ctx.sm_count());
  void* ws = plan.workspace_bytes ? ctx.scratch(0, plan.workspace_bytes, stream) : nullptr;
  sm90::linear_thin_launch(p, plan, ws, stream);
}

void run_cublaslt(Context& ctx, const OutProjShape& s, const OutProjArgs& a, cudaStream_t stream) {
  const std::int64_t T = s.tokens(), Hd = s.hidden();

  // dW on the side stream, concurrently with dX: small-T workloads fill the GPU only together. Where a check below
  // throws (e.g. cuBLASLt has no algorithm for dX), the caller's stream still waits for dW, which writes grad_weight,
  // before the Error reaches the caller.
  ctx.fork(stream);
  struct JoinOnThrow {
    Context& ctx;
    cudaStream_t stream;
    bool done = false;
    ~JoinOnThrow() {
      if (done) return;
      try {
        ctx.join(stream);
      } catch (...) {  // (an Error is already on its way)
      }
    }
  } joined{ctx, stream};
  dw_cublaslt(ctx, 1, ctx.side_stream(), s, a);

  Gemm dx;  // G = dY·W: dY [T, Hd], W [Hd(out), Hd(in)] used as [K=out, N=in]
  dx.M = T, dx.N = Hd, dx.K = Hd, dx.lda = Hd, dx.ldb = Hd, dx.ldc = Hd;
  auto* g = static_cast<__nv_bfloat16*>(ctx.scratch(0, static_cast<std::size_t>(T * Hd) * sizeof(bf16), stream));
  gemm(ctx, 0, stream, dx, a.grad_output.data, a.weight.data, g);

  head_split(g, reinterpret_cast<__nv_bfloat16*>(a.grad_attn_output.data), T, s.seq_len, s.num_heads,
             s.head_dim, stream);
  joined.done = true;
  ctx.join(stream);
}

}  // namespace

void run(const OutProjShape& s, const OutProjArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  const Path path = forced_path();
  const std::optional<sm90::SplitReduce> reduce = split_reduce();
  ctx.claim(stream, !o.deterministic);
  const auto key = [&] {
    // path and reduce come from ATTNBWD_* switches, which enqueue adds to the key.
    return graph_key(1, a, {});
  };
  // Graphs only with ATTNBWD_CUDA_GRAPHS=1: one or two launches gain nothing from a replay, and at T = 256 the
  // hybrid's two streams replayed took 21.7 µs per call against 17.6 direct (H200, 2026-12-02).
  constexpr bool kInAuto = false;
  ctx.enqueue(key, stream, [&](cudaStream_t st) {
    if (path == Path::Hybrid) {
      const sm90::LinearBackward p = kernel_problem(s, a);
      kernel_takes(ctx, p, true);  // forced: an Error where it cannot
      run_hybrid(ctx, s, a, p, st);
      return;
    }
    if (path == Path::Thin) {
      run_thin(ctx, s, a, st);
      return;
    }
    if (path == Path::CublasLt || !run_sm90(ctx, s, a, st, path == Path::Sm90, reduce)) run_cublaslt(ctx, s, a, st);
  }, kInAuto);
  ctx.release(stream);
}

}  // namespace attnbwd::cuda
