// The CUDA fast path for vision_mha_norm_backward (spec §4) against the serial oracle, in both
// precision modes: tiny and odd shapes (S = 1, 7, 9, 33, 65, 131 across the 4-float row padding and
// the row kernel's register tiers; B = 1..3; head_dim 4..128), tensors only 4-byte aligned (the
// scalar LayerNorm kernel and cuBLASLt's unaligned algorithms), run-to-run bit equality, and the
// smallest benchmark workload (#10, B = 1, S = 577) at its own atol. Every element of all seven
// outputs is compared; outputs are poisoned with NaN before each run.
// Rule: spec §6 (the workload's atol, rtol 1e-5, matched ratio 0.99) plus a relative-L2 bound per
// mode: Default runs fp16-operand products (the projections, and for head_dim 64 the attention kernels;
// bound 3e-3), Strict full fp32 GEMMs (bound 1e-5, the portable path's). head_dim 64 shapes take the
// fp16 attention kernels in Default (S = 1, 7, 65, 128, 131, 577: one to ten 64-row blocks, with and
// without tails).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/common/host_case.hpp"
#include "tests/common/scoped_env.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "cuda/context.hpp"
#include "tests/common/cuda_case.hpp"

namespace attnbwd::test {
namespace {

using std::int64_t;
using Args = VisionMhaArgs;
const std::string kOp = "vision_mha_norm_backward";
constexpr double kRtol = 1e-5;
constexpr Precision kModes[] = {Precision::Default, Precision::Strict};

double max_rel_l2(Precision p) { return p == Precision::Strict ? 1e-5 : 3e-3; }
const char* mode_name(Precision p) { return p == Precision::Strict ? "strict" : "default"; }

// Runs the default backend choice in mode `p` on device copies of `got`'s arguments, asserts it was the
// fast path, and copies the outputs back.
void run_cuda(HostCase<Args>& got, Precision p, std::size_t offset = 0) {
  ShiftedArgs<Args> device(got.args, offset);
  Options o;
  o.precision = p;
  const Backend b = detail::run(Kokkos::Cuda(), device.args, o);
  Kokkos::Cuda().fence();
  ASSERT_EQ(b, Backend::Cuda);
  device.outputs_to(got.args);
}

// The oracle once, then the fast path in both modes; every output of each against the oracle's.
void check(const tools::TensorSet& in, const tools::Axes& given, double atol, std::size_t offset = 0) {
  const Oracle<Args> want(in, given);
  for (const Precision p : kModes) {
    HostCase<Args> got(in, given);
    const std::string context = tools::axes_to_string(got.axes) + " " + mode_name(p) +
                                (offset ? " offset=" + std::to_string(offset) : std::string());
    SCOPED_TRACE(context);
    run_cuda(got, p, offset);
    const auto g = outputs_of(got.args), w = outputs_of(want.host.args);
    ASSERT_EQ(g.size(), 7u);
    ASSERT_EQ(g.size(), w.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(g[i].size, w[i].size);
      const auto r = close(g[i].name, g[i].data, w[i].data, g[i].size, Tolerance{atol, kRtol, 0.99, max_rel_l2(p)});
      std::printf("[ measured ] cuda %s: %s\n", context.c_str(), r.message());
      EXPECT_TRUE(r) << context;
    }
  }
}

tools::Axes axes_of(int64_t B, int64_t S, int64_t H, int64_t D) {
  return tools::Axes{{"batch_size", B}, {"seq_len", S}, {"num_heads", H}, {"head_dim", D}, {"embed_dim", H * D}};
}

struct Shape {
  int64_t B, S, H, D;
};

TEST(CudaVisionMhaNorm, TinyAndOddShapesMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  const Shape shapes[] = {{1, 1, 2, 64},  {2, 7, 2, 64},  {1, 65, 3, 64}, {3, 131, 2, 64}, {2, 128, 2, 64},
                          {2, 33, 4, 32}, {1, 131, 1, 128}, {2, 9, 3, 4},  {3, 65, 2, 16}};
  std::uint64_t tag = 0;
  for (const Shape& c : shapes) {
    const tools::Axes axes = axes_of(c.B, c.S, c.H, c.D);
    check(tools::generate_inputs(kOp, axes, fresh_seed(tag++)), axes, smallest_atol(kOp));
  }
}

// Every tensor 4 bytes past a 16-byte boundary: no float4 access and no 16-byte cuBLASLt algorithm
// may be used on them.
TEST(CudaVisionMhaNorm, TinyUnalignedTensorsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  // {1, 131, 2, 64}: full 64×64 P tiles of the fp16 attention kernels with every row phase, and the
  // tensor's first tile starting 4 bytes past a 16-byte boundary (its 16-byte chunks would start before P).
  const Shape shapes[] = {{2, 7, 2, 64}, {1, 65, 3, 8}, {1, 131, 2, 64}};
  std::uint64_t tag = 50;
  for (const Shape& c : shapes) {
    const tools::Axes axes = axes_of(c.B, c.S, c.H, c.D);
    check(tools::generate_inputs(kOp, axes, fresh_seed(tag++)), axes, smallest_atol(kOp), 4);
  }
}

// The A/B variant switches of Default (backends/cuda/README.md "Switches"), each on a shape its code path takes. The
// variable is set for the one check and removed after it, also when the check fails.
struct Variant {
  const char* var;
  const char* value;
  Shape shape;
  const char* what;
  bool sm90_only = false;  // asks for the sm_90a wgmma kernels: elsewhere an Error naming the switch
};
const Variant kVariants[] = {
    {"ATTNBWD_CUDA_FP32_GEMM", "tf32", {2, 65, 3, 64}, "projection GEMMs in TF32 instead of fp16"},
    {"ATTNBWD_CUDA_MHA_ATTN", "gemm", {2, 131, 3, 64},
     "attention through the GEMM + row-kernel stages instead of the fp16 kernels (head_dim 64)"},
    {"ATTNBWD_CUDA_MHA_WGMMA", "legacy", {2, 128, 2, 64},
     "the one-warpgroup wgmma kernels by the rule before the warp-specialised ones (sm_90 only)", true},
    {"ATTNBWD_CUDA_MHA_ATTN", "mma", {2, 131, 3, 64},
     "attention through the mma.sync kernels (the default off sm_90) instead of the wgmma kernels"},
    {"ATTNBWD_CUDA_MHA_LN", "block", {1, 65, 4, 64},
     "LayerNorm with one block per token on a shape the one-warp-per-token kernel would take (E = 256)"},
    {"ATTNBWD_CUDA_MHA_LN", "div", {2, 65, 4, 64},
     "LayerNorm one warp per token with two divisions per element instead of a reciprocal of sigma (E = 256)"},
    {"ATTNBWD_CUDA_MHA_LN", "div", {1, 577, 16, 64},
     "LayerNorm one warp per token with two divisions per element (E = 1024, the model's width)"},
    {"ATTNBWD_CUDA_MHA_CONVERT", "late", {2, 131, 3, 64},
     "A, x_norm and Wqkv converted together on the side stream, q, k, v from the op's start (fp16 attention)"},
    {"ATTNBWD_CUDA_MHA_LN", "rcp", {2, 65, 4, 64},
     "LayerNorm one warp per token without the loads ahead of the default (E = 256)"},
    {"ATTNBWD_CUDA_MHA_LN", "rcp", {3, 577, 16, 64},
     "LayerNorm without the loads ahead at the model's width, blocks of several tokens per warp (E = 1024)"},
    {"ATTNBWD_CUDA_LT_TUNE", "verbose", {1, 577, 16, 64},
     "every cuBLASLt GEMM the fastest of up to 16 timed candidates instead of the first heuristic answer"},
    {"ATTNBWD_CUDA_LT_TUNE", "on", {2, 131, 3, 64}, "tuned cuBLASLt GEMMs on a shape with tails"},
};

// The atol of a shape: at the model's width (16 heads of 64, S = 577) that of the workload with the same batch, whose
// sums over B·S tokens (grad_ln_bias, grad_ln_weight, the biases) have the same size; else the tightest workload's.
double atol_of(const Shape& c) {
  if (c.H == 16 && c.D == 64 && c.S == 577)
    for (const tools::Workload& w : tools::load_workloads(kOp))
      if (w.axes.at("batch_size") == c.B) return w.atol;
  return smallest_atol(kOp);
}

// A Default run on device copies of `in` whose outputs are poisoned (every byte 0xff), each tensor `offset` bytes into
// its allocation, that must be an attnbwd::Error naming `named`, raised before any output is written.
void expect_error_writes_nothing(const tools::TensorSet& in, const tools::Axes& axes, std::size_t offset,
                                 const std::string& named) {
  HostCase<Args> c(in, axes);
  ShiftedArgs<Args> device(c.args, offset);
  try {
    detail::run(Kokkos::Cuda(), device.args, Options{});
    ADD_FAILURE() << "expected attnbwd::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), named);
  }
  Kokkos::Cuda().fence();
  device.outputs_to(c.args);
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    std::size_t written = 0;
    for (const auto byte : c.outputs[i]) written += static_cast<unsigned char>(byte) != 0xffu;
    EXPECT_EQ(written, 0u) << "output " << i << " was written";
  }
}

TEST(CudaVisionMhaNorm, VariantSwitchesMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  std::uint64_t tag = 60;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(std::string(v.var) + "=" + v.value + ": " + v.what);
    const tools::Axes axes = axes_of(v.shape.B, v.shape.S, v.shape.H, v.shape.D);
    const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(tag++));
    const ScopedEnv env(v.var, v.value);
    if (v.sm90_only && !is_sm90()) {
      expect_error_writes_nothing(in, axes, 0, v.var);  // off sm_90: the wgmma kernels cannot take the call
      continue;
    }
    check(in, axes, atol_of(v.shape));
  }
}

// The attention kernels' own check on shapes with and without tails and with more blocks than the streaming
// depth (S = 577: 10 blocks; S = 131, 256: odd and even block counts): the sm_90a wgmma kernels (the
// default on an sm_90 device; elsewhere ATTNBWD_CUDA_MHA_ATTN=wgmma is an Error naming the switch),
// streaming through 2 or 3 buffers, at 3 with each copy scheme (ATTNBWD_CUDA_MHA_COPY=prows|trows|rows), and
// at 2 with 3 CTAs per SM (ATTNBWD_CUDA_MHA_WGMMA=occ3: 168 registers, δ from global memory), each of occ3
// and serial3 also with split blocks (ATTNBWD_CUDA_MHA_SPLIT=2: two CTAs per block, each streaming half of
// the other sequence, the second adding the first's sums; opt-in), and the others unsplit (=1, auto).
TEST(CudaVisionMhaNorm, WgmmaAttentionVariantMatchesTheOracle) {
  ATTNBWD_SEED_TRACE();
  const Shape shapes[] = {{2, 131, 3, 64}, {1, 256, 2, 64}, {1, 577, 2, 64}};
  std::uint64_t tag = 70;
  for (const Shape& c : shapes) {
    const tools::Axes axes = axes_of(c.B, c.S, c.H, c.D);
    const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(tag++));
    const ScopedEnv env("ATTNBWD_CUDA_MHA_ATTN", "wgmma");
    if (!is_sm90()) {
      expect_error_writes_nothing(in, axes, 0, "ATTNBWD_CUDA_MHA_ATTN");
      continue;
    }
    struct Loop {
      const char *wgmma, *copy, *split;
    };
    for (const Loop& l : {Loop{"serial2", "auto", "1"}, Loop{"serial3", "auto", "1"}, Loop{"serial3", "auto", "2"},
                          Loop{"serial3", "prows", "1"}, Loop{"serial3", "trows", "1"}, Loop{"serial3", "rows", "1"},
                          Loop{"occ3", "auto", "1"}, Loop{"occ3", "auto", "2"}}) {
      SCOPED_TRACE(std::string("ATTNBWD_CUDA_MHA_WGMMA=") + l.wgmma + " ATTNBWD_CUDA_MHA_COPY=" + l.copy +
                   " ATTNBWD_CUDA_MHA_SPLIT=" + l.split);
      const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", l.wgmma);
      const ScopedEnv copies("ATTNBWD_CUDA_MHA_COPY", l.copy);
      const ScopedEnv split("ATTNBWD_CUDA_MHA_SPLIT", l.split);
      check(in, axes, smallest_atol(kOp));
    }
  }
}

// Split blocks need occ3 or serial3 with the default copies: forcing them with serial2 is an Error naming
// ATTNBWD_CUDA_MHA_SPLIT (on an sm_90 device, where the wgmma kernels run).
TEST(CudaVisionMhaNorm, ForcedSplitWithAnUnsupportedSchemeIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  const tools::Axes axes = axes_of(1, 131, 2, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(310));
  const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", "serial2");
  const ScopedEnv split("ATTNBWD_CUDA_MHA_SPLIT", "2");
  expect_error_writes_nothing(in, axes, 0, "ATTNBWD_CUDA_MHA_SPLIT");
}

// For each shape (fresh inputs, seeds tag, tag + 1, ...): Default mode through the serial wgmma kernels with three
// buffers, whose bits every warp-specialised form must give, then body(in, axes, serial).
// The op's scratch (δ, the fp16 dQKV operand, the column-sum rows: all of what these kernels write) is set to 0xff
// before every call, so that work a form leaves undone shows as NaN instead of the previous call's bits.
template <class Body>
void against_serial3(std::initializer_list<Shape> shapes, std::uint64_t tag, const Body& body) {
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  for (const Shape& c : shapes) {
    const tools::Axes axes = axes_of(c.B, c.S, c.H, c.D);
    SCOPED_TRACE(tools::axes_to_string(axes));
    const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(tag++));
    HostCase<Args> serial(in, axes);
    {
      const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", "serial3");
      run_cuda(serial, Precision::Default);
    }
    body(in, axes, serial);
  }
}

// The context's first n counters are zero (the fused launch's ticket and per-head counters, left zero for the next
// call; a per-head counter left at its count would let the next call's dK/dV work skip its wait for δ).
void expect_counters_zero(std::int64_t n) {
  unsigned* d = cuda::Context::current().counters(static_cast<std::size_t>(n), nullptr);
  std::vector<unsigned> h(static_cast<std::size_t>(n), 1u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  std::size_t nonzero = 0;
  for (const unsigned v : h) nonzero += v != 0u;
  EXPECT_EQ(nonzero, 0u) << "of the first " << n << " counters";
}

// One Default run under the environment as it is, expected to give `want`'s bits.
void expect_run_gives(const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& want,
                      const std::string& label) {
  HostCase<Args> got(in, axes);
  run_cuda(got, Precision::Default);
  expect_same_bits(got, want, label);
}

// serial3's bits (`serial`) in each warp-specialised scheme of `schemes`, with PDL off, and in the fused launch twice
// (its counters left zero), then the oracle where H ≤ 4 (else bits only); `label` names the switches set around it.
void expect_every_ws_form(const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial,
                          const std::string& label, std::initializer_list<const char*> schemes) {
  for (const char* scheme : schemes) {
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", scheme);
    expect_run_gives(in, axes, serial, label + ", ATTNBWD_CUDA_MHA_WGMMA=" + scheme + " vs serial3");
  }
  {
    const ScopedEnv pdl("ATTNBWD_CUDA_MHA_PDL", "off");
    expect_run_gives(in, axes, serial, label + ", ATTNBWD_CUDA_MHA_PDL=off vs serial3");
  }
  {
    const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
    for (int run = 0; run < 2; ++run) {
      expect_run_gives(in, axes, serial, label + ", ATTNBWD_CUDA_MHA_FUSED=on vs serial3, run " + std::to_string(run));
      expect_counters_zero(1 + 2 * axes.at("batch_size") * axes.at("num_heads"));
    }
  }
  if (axes.at("num_heads") <= 4) check(in, axes, smallest_atol(kOp));
}

// The warp-specialised wgmma kernels (ATTNBWD_CUDA_MHA_WGMMA=wstmaw, the default on sm_90 where they run: P by TMA
// through a view of rows of 4·S floats for both kernels; wstma: with narrower dQ view rows; ws: by cp.async for
// dK/dV; wscp: cp.async for both) compute the same products in the same order as
// serial3, so every output has serial3's bits, with wstmaw's dK/dV kernel a programmatic dependent of its dQ
// kernel (ATTNBWD_CUDA_MHA_PDL auto) or not (off); and they match the oracle. Shapes with B·H·S a multiple of 4 (where
// they run): one to ten 64-row blocks, CTAs with one or two consumer blocks, tails of 1, 3 and 8 rows, a single
// row, every row phase of P (S odd) and view slots that start mid-row.
TEST(CudaVisionMhaNorm, WarpSpecialisedAttentionGivesTheSerialBits) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  ATTNBWD_SEED_TRACE();
  const auto body = [](const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial) {
    for (const char* scheme : {"ws", "wstma", "wscp", "wstmaw"}) {
      const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", scheme);
      expect_run_gives(in, axes, serial, std::string("ATTNBWD_CUDA_MHA_WGMMA=") + scheme + " vs serial3");
    }
    {  // wstmaw's dK/dV kernel launched after the dQ kernel ends instead of as its programmatic dependent (auto)
      const ScopedEnv pdl("ATTNBWD_CUDA_MHA_PDL", "off");
      expect_run_gives(in, axes, serial, "ATTNBWD_CUDA_MHA_PDL=off vs serial3");
    }
    {  // one launch of both kinds of work (the lag clamped to the heads here), run twice: its counters are left zero
      const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
      for (int run = 0; run < 2; ++run)
        expect_run_gives(in, axes, serial, "ATTNBWD_CUDA_MHA_FUSED=on vs serial3, run " + std::to_string(run));
    }
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", "wstmaw");
    check(in, axes, smallest_atol(kOp));
  };
  against_serial3({{2, 131, 2, 64}, {1, 256, 2, 64}, {1, 577, 4, 64}, {1, 65, 4, 64}, {4, 1, 1, 64}, {1, 200, 4, 64}},
                  400, body);
}

// The narrow last block (ATTNBWD_CUDA_MHA_TAIL=narrow, auto where the ws kernels run: where at most 16 rows of the
// streamed sequence's last block lie inside S, its products on those 16 alone) gives serial3's bits in every
// warp-specialised form, the dependent and the fused launches included (twice: counters left zero), and matches the
// oracle; so does the full block (TAIL=full), and so do both with P's boxes trimmed (ATTNBWD_CUDA_MHA_PTRIM=on),
// trimmed with the dK/dV boxes' columns cut (cols; auto where the dK/dV kernel takes P by TMA) and untrimmed (off).
// Tails of 1 (S = 577 and S = 1, where the only block is narrow), 3, 8 and 16 rows take the narrow block; 17 rows
// (S = 81) keep the full one; the head's last CTA has 1 (S = 577), 3, 8 (S = 200), 16, 17 or 65 rows. With cols the
// last CTA's boxes are cut where it holds ≤ 69 keys: 65 (S = 577), 3 (S = 131), 69 (S = 197), 1 (S = 1); not with 70
// (S = 198), 72 (S = 200), 80 or 81. B = 2 at S = 197: the ws kernels need B·H·S % 4 == 0 (P viewed as rows of 4·S).
TEST(CudaVisionMhaNorm, NarrowTailGivesTheSerialBits) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  ATTNBWD_SEED_TRACE();
  const auto body = [](const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial) {
    const ScopedEnv tail("ATTNBWD_CUDA_MHA_TAIL", "narrow");
    expect_every_ws_form(in, axes, serial, "TAIL=narrow", {"ws", "wstma", "wscp", "wstmaw"});
    {  // P's boxes trimmed to what lies inside S: the narrow blocks' columns and rows, the head's last rows
      const ScopedEnv trim("ATTNBWD_CUDA_MHA_PTRIM", "on");
      // wscp takes P by cp.async: PTRIM=on is an Error there
      expect_every_ws_form(in, axes, serial, "PTRIM=on", {"ws", "wstma", "wstmaw"});
      const ScopedEnv full("ATTNBWD_CUDA_MHA_TAIL", "full");  // the rows trim alone
      expect_run_gives(in, axes, serial, "PTRIM=on, TAIL=full vs serial3");
    }
    {  // and the dK/dV kernel's boxes cut to 72 columns where the CTA's keys fit (ws: that kernel takes P by cp.async)
      const ScopedEnv trim("ATTNBWD_CUDA_MHA_PTRIM", "cols");
      expect_every_ws_form(in, axes, serial, "PTRIM=cols", {"wstma", "wstmaw"});
      const ScopedEnv full("ATTNBWD_CUDA_MHA_TAIL", "full");
      expect_run_gives(in, axes, serial, "PTRIM=cols, TAIL=full vs serial3");
    }
    {  // P's whole boxes
      const ScopedEnv untrimmed("ATTNBWD_CUDA_MHA_PTRIM", "off");
      expect_run_gives(in, axes, serial, "PTRIM=off vs serial3");
      const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
      expect_run_gives(in, axes, serial, "PTRIM=off, ATTNBWD_CUDA_MHA_FUSED=on vs serial3");
    }
    const ScopedEnv full("ATTNBWD_CUDA_MHA_TAIL", "full");
    expect_run_gives(in, axes, serial, "TAIL=full vs serial3");
    const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
    expect_run_gives(in, axes, serial, "TAIL=full, ATTNBWD_CUDA_MHA_FUSED=on vs serial3");
  };
  against_serial3({{1, 577, 4, 64}, {2, 131, 2, 64}, {1, 200, 4, 64}, {1, 80, 4, 64}, {1, 81, 4, 64}, {4, 1, 1, 64},
                   {2, 577, 16, 64}, {2, 197, 2, 64}, {1, 198, 2, 64}},
                  480, body);
}

// `var`=`value` with each ATTNBWD_CUDA_MHA_WGMMA scheme of `schemes`, and `var`=`unknown`, are each an Error naming
// `var`, raised before any output is written (B = 1, S = 131, 4 heads; inputs of fresh_seed(tag)).
void expect_refused_with(const char* var, const char* value, std::initializer_list<const char*> schemes,
                         const char* unknown, std::uint64_t tag) {
  const tools::Axes axes = axes_of(1, 131, 4, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(tag));
  for (const char* scheme : schemes) {
    SCOPED_TRACE(scheme);
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", scheme);
    const ScopedEnv env(var, value);
    expect_error_writes_nothing(in, axes, 0, var);
  }
  const ScopedEnv env(var, unknown);
  expect_error_writes_nothing(in, axes, 0, var);
}

// ATTNBWD_CUDA_MHA_TAIL=narrow is built for the warp-specialised kernels: with another scheme it is an Error naming
// the switch, as is a value it does not know; raised before any output is written.
TEST(CudaVisionMhaNorm, NarrowTailWithAnotherSchemeIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  expect_refused_with("ATTNBWD_CUDA_MHA_TAIL", "narrow", {"serial3", "occ3", "legacy"}, "thin", 490);
}

// ATTNBWD_CUDA_MHA_PTRIM=on trims P's TMA boxes: with a scheme that takes P by cp.async in both kernels (wscp) or
// with the serial kernels it is an Error naming the switch, as is a value it does not know; so is cols where the
// dK/dV kernel takes P by cp.async (ws too); raised before any output is written.
TEST(CudaVisionMhaNorm, PTrimWithoutTmaIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  expect_refused_with("ATTNBWD_CUDA_MHA_PTRIM", "on", {"wscp", "serial3", "legacy"}, "yes", 495);
  // cols cuts the dK/dV kernel's boxes: ws takes P by cp.async there
  expect_refused_with("ATTNBWD_CUDA_MHA_PTRIM", "cols", {"ws", "wscp", "serial3", "legacy"}, "yes", 496);
}

// ATTNBWD_CUDA_MHA_DELTA: the dK/dV kernel copies each stage's δ through a TMA tensor map (tma, auto) or by a bulk copy
// (bulk); serial3's bits both ways in every warp-specialised form (P by TMA and by cp.async), with PDL off, and in the
// fused launch twice (δ then arrives after the flag wait, the first stages' copies issued late), and the oracle; at
// S = 577 (a narrow last block), 131 and 1 (one block: every δ copy issued after the wait), 2 × 577 × 16 (auto fuses).
TEST(CudaVisionMhaNorm, DeltaCopiesGiveTheSerialBits) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  ATTNBWD_SEED_TRACE();
  const auto body = [](const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial) {
    for (const char* how : {"tma", "bulk"}) {
      const ScopedEnv delta("ATTNBWD_CUDA_MHA_DELTA", how);
      const std::string label = std::string("ATTNBWD_CUDA_MHA_DELTA=") + how;
      expect_run_gives(in, axes, serial, label + " (auto scheme) vs serial3");
      expect_every_ws_form(in, axes, serial, label, {"ws", "wstma", "wscp", "wstmaw"});
    }
  };
  against_serial3({{1, 577, 4, 64}, {2, 131, 2, 64}, {4, 1, 1, 64}, {2, 577, 16, 64}}, 500, body);
}

// ATTNBWD_CUDA_MHA_DELTA=tma is built for the warp-specialised dK/dV kernel: with another scheme it is an Error naming
// the switch, as is a value it does not know; raised before any output is written.
TEST(CudaVisionMhaNorm, DeltaTmaWithAnotherSchemeIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  expect_refused_with("ATTNBWD_CUDA_MHA_DELTA", "tma", {"serial3", "occ3", "legacy"}, "tensor", 505);
}

// The fused launch (ATTNBWD_CUDA_MHA_FUSED=on) orders the dQ and dK/dV work of many heads by tickets, each head's
// dK/dV work ATTNBWD_CUDA_MHA_LAG heads after its dQ work and waiting on a counter for its δ: with more heads than
// the lag every part of the order (dQ only, both, dK/dV only) runs, with one and two consumer blocks per item and
// a tail block. serial3's bits at every lag, twice each (the ticket and counters are left zero for the next call), and
// with the switch at auto.
TEST(CudaVisionMhaNorm, FusedLaunchGivesTheSerialBitsAtEveryLag) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  ATTNBWD_SEED_TRACE();
  const auto body = [](const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial) {
    // the default (auto: the fused launch where each kernel's grid would take 1-9 waves)
    expect_run_gives(in, axes, serial, "ATTNBWD_CUDA_MHA_FUSED=auto");
    const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
    for (const char* lag : {"4", "8", "auto"}) {
      const ScopedEnv lag_env("ATTNBWD_CUDA_MHA_LAG", lag);
      for (int run = 0; run < 2; ++run) {
        expect_run_gives(in, axes, serial, std::string("ATTNBWD_CUDA_MHA_LAG=") + lag + ", run " + std::to_string(run));
        expect_counters_zero(1 + 2 * axes.at("batch_size") * axes.at("num_heads"));
      }
    }
  };
  against_serial3({{4, 131, 4, 64}, {2, 577, 8, 64}, {2, 577, 16, 64}}, 450, body);  // the last: auto fuses (H200)
}

// Call after call at #4's shape (B = 2, S = 577, 16 heads: the fused launch by auto, 2.4 waves of CTAs), each call
// finishes with serial3's bits and leaves the counters zero. The fifty-fourth session saw this launch hang in 5 of 6
// perf runs of #4 (~60 calls each) with a build whose producer threads without copies followed the stage barriers
// (dq_ws_body, dkv_ws_body); a hang here shows as the test binary's timeout.
TEST(CudaVisionMhaNorm, FusedLaunchFinishesCallAfterCall) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  ATTNBWD_SEED_TRACE();
  const auto body = [](const tools::TensorSet& in, const tools::Axes& axes, const HostCase<Args>& serial) {
    for (int run = 0; run < 40; ++run) expect_run_gives(in, axes, serial, "call " + std::to_string(run));
    expect_counters_zero(1 + 2 * axes.at("batch_size") * axes.at("num_heads"));
  };
  against_serial3({{2, 577, 16, 64}}, 455, body);
}

// The side stream's weight-gradient GEMMs sized for part of the SMs (ATTNBWD_CUDA_MHA_DWO_SMS and
// ATTNBWD_CUDA_MHA_DWQKV_SMS: auto, 64, a few, every SM) match the oracle in both modes; a malformed value, 0 or one
// above the SM count is an Error naming its switch, raised before any output is written.
TEST(CudaVisionMhaNorm, DwSmTargetsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  const tools::Axes axes = axes_of(3, 131, 4, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(470));
  for (const char* v : {"auto", "64", "8", "off"}) {
    SCOPED_TRACE(std::string("SM targets ") + v);
    const ScopedEnv out("ATTNBWD_CUDA_MHA_DWO_SMS", v), qkv("ATTNBWD_CUDA_MHA_DWQKV_SMS", v);
    check(in, axes, smallest_atol(kOp));
  }
  for (const char* var : {"ATTNBWD_CUDA_MHA_DWO_SMS", "ATTNBWD_CUDA_MHA_DWQKV_SMS"})
    for (const char* bad : {"0", "some", "100000"}) {
      SCOPED_TRACE(std::string(var) + "=" + bad);
      const ScopedEnv env(var, bad);
      expect_error_writes_nothing(in, axes, 0, var);
    }
}

// The fused launch is built for the wstmaw kernels and is one launch: with another scheme, or with
// ATTNBWD_CUDA_MHA_PDL=on, it is an Error naming ATTNBWD_CUDA_MHA_FUSED; a lag it does not know is an Error naming
// ATTNBWD_CUDA_MHA_LAG. Raised before any output is written (the outputs keep their poison).
TEST(CudaVisionMhaNorm, FusedLaunchWithAnotherSchemeOrPdlIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  const tools::Axes axes = axes_of(1, 131, 4, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(460));
  struct Case {
    const char* scheme;
    const char* pdl;
    const char* lag;
    const char* named;
  };
  for (const Case& k : {Case{"ws", "auto", "auto", "ATTNBWD_CUDA_MHA_FUSED"},
                        Case{"serial3", "auto", "auto", "ATTNBWD_CUDA_MHA_FUSED"},
                        Case{"auto", "on", "auto", "ATTNBWD_CUDA_MHA_FUSED"},
                        Case{"auto", "auto", "5", "ATTNBWD_CUDA_MHA_LAG"}}) {
    SCOPED_TRACE(std::string(k.scheme) + " PDL=" + k.pdl + " LAG=" + k.lag);
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", k.scheme);
    const ScopedEnv pdl("ATTNBWD_CUDA_MHA_PDL", k.pdl);
    const ScopedEnv lag("ATTNBWD_CUDA_MHA_LAG", k.lag);
    const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
    expect_error_writes_nothing(in, axes, 0, k.named);
  }
}

// The dependent launch is built for the wstmaw kernels: asked for with another scheme it is an Error naming its switch
// (on an sm_90 device, where the wgmma kernels run), on a shape every ws form can run (B·H·S a multiple of 4), so
// the Error is the switch's own and not the scheme's; raised before any output is written.
TEST(CudaVisionMhaNorm, DependentLaunchWithAnotherSchemeIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  const tools::Axes axes = axes_of(1, 131, 4, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(330));
  for (const char* scheme : {"ws", "serial3"}) {
    SCOPED_TRACE(std::string("ATTNBWD_CUDA_MHA_PDL=on with ") + scheme);
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", scheme);
    const ScopedEnv pdl("ATTNBWD_CUDA_MHA_PDL", "on");
    expect_error_writes_nothing(in, axes, 0, "ATTNBWD_CUDA_MHA_PDL");
  }
}

// Forced where they cannot run (B·H·S not a multiple of 4, or P not 16-byte aligned) the warp-specialised
// kernels are an Error naming ATTNBWD_CUDA_MHA_WGMMA, raised before any output is written.
TEST(CudaVisionMhaNorm, ForcedWarpSpecialisedAttentionWhereItCannotRunIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels run on sm_90 only";
  struct Case {
    Shape shape;
    std::size_t offset;
  };
  for (const Case& k : {Case{{2, 131, 3, 64}, 0}, Case{{1, 128, 2, 64}, 4}}) {
    const tools::Axes axes = axes_of(k.shape.B, k.shape.S, k.shape.H, k.shape.D);
    SCOPED_TRACE(tools::axes_to_string(axes) + " offset " + std::to_string(k.offset));
    const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(320));
    const ScopedEnv depth("ATTNBWD_CUDA_MHA_WGMMA", "ws");
    expect_error_writes_nothing(in, axes, k.offset, "ATTNBWD_CUDA_MHA_WGMMA");
  }
}

// No order-dependent atomics: two runs give the same bits, in both modes.
TEST(CudaVisionMhaNorm, RunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  const tools::Axes axes = axes_of(2, 131, 2, 64);
  const tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(300));
  for (const Precision p : kModes) {
    HostCase<Args> first(in, axes), second(in, axes);
    run_cuda(first, p);
    run_cuda(second, p);
    expect_same_bits(second, first, std::string("second run, ") + mode_name(p));
  }
}

// Benchmark workload #10 (B = 1, S = 577, E = 1024, 16 heads of 64) at its own atol.
TEST(CudaVisionMhaNorm, Workload10MatchesTheOracle) {
  ATTNBWD_SEED_TRACE();
  const tools::Workload w = tools::find_workload(tools::load_workloads(kOp), "10");
  check(tools::generate_inputs(kOp, w.axes, fresh_seed(100 + w.index), w.scalars), w.axes, w.atol);
}

}  // namespace
}  // namespace attnbwd::test

#endif
