// The CUDA fast path for vision_varlen_rope_backward (spec §5) against the serial oracle, in both
// precision modes (Default: TF32 GEMMs and attention products; Strict: fp32 GEMMs, 3xTF32 attention):
// odd sequence mixes at head_dim 128 with 1-2 heads (one sequence; only length-1 sequences; lengths
// 1, 7, 65, 131 mixed; empty sequences first, between and last; lengths around the 64-token blocks;
// a sequence of 300 tokens = 5 key blocks), a call without the caller's host cu_seqlens, run-to-run
// bit equality, and the two smallest benchmark workloads (#8: S = 131, one sequence; #1: S = 211,
// lengths 106 and 105) at their own atol. Every element of all five outputs is compared; outputs
// are poisoned with NaN before each run.
// Rule: spec §6 (the workload's atol, or the op's smallest for other shapes; rtol 1e-5; matched
// ratio 0.99) plus a relative-L2 bound per mode: TF32 rounds operands to 11 significant bits
// (relative 2^-11 ≈ 5e-4 per product), so Default gets 1e-2; Strict is fp32-accurate and gets 1e-4.
// The measured values are printed ("[ measured ]").
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/common/host_case.hpp"
#include "tests/common/scoped_env.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "tests/common/cuda_case.hpp"

namespace attnbwd::test {
namespace {

using std::int64_t;
using Args = VisionVarlenArgs;
const std::string kOp = "vision_varlen_rope_backward";
constexpr double kRtol = 1e-5;

double max_rel_l2(Precision p) { return p == Precision::Strict ? 1e-4 : 1e-2; }

// Runs the default backend choice in mode `p` on device copies of `got`'s arguments and asserts it
// was the fast path.
// With `offset` > 0 every device tensor starts that many bytes into its allocation (unaligned).
void run_cuda(HostCase<Args>& got, Precision p, bool host_cu_seqlens = true, std::size_t offset = 0) {
  if (!host_cu_seqlens) got.args.cu_seqlens_host = nullptr;
  ShiftedArgs<Args> device(got.args, offset);
  Options o;
  o.precision = p;
  const Backend b = detail::run(Kokkos::Cuda(), device.args, o);
  Kokkos::Cuda().fence();
  ASSERT_EQ(b, Backend::Cuda);
  device.outputs_to(got.args);
}

// The fast path in both modes against the oracle's outputs `want`; every output checked.
void check_against(const Oracle<Args>& want, const std::string& label, const tools::TensorSet& in,
                   const tools::Axes& axes, double atol, bool host_cu_seqlens = true, std::size_t offset = 0) {
  for (const Precision p : {Precision::Default, Precision::Strict}) {
    HostCase<Args> got(in, axes);
    const std::string context = label + " " + to_string(p);
    SCOPED_TRACE(context);
    run_cuda(got, p, host_cu_seqlens, offset);
    const auto g = outputs_of(got.args), w = outputs_of(want.host.args);
    ASSERT_EQ(g.size(), 5u);
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(g[i].size, w[i].size);
      const auto r = close(g[i].name, g[i].data, w[i].data, g[i].size, Tolerance{atol, kRtol, 0.99, max_rel_l2(p)});
      std::printf("[ measured ] cuda %s: %s\n", context.c_str(), r.message());
      EXPECT_TRUE(r) << context;
    }
  }
}

// The oracle once, then the fast path in both modes; every output checked.
void check(const std::string& label, const tools::TensorSet& in, const tools::Axes& axes, double atol,
           bool host_cu_seqlens = true, std::size_t offset = 0) {
  const Oracle<Args> want(in, axes);
  check_against(want, label, in, axes, atol, host_cu_seqlens, offset);
}

// Inputs for sequences of the given lengths (zeros allowed), H heads of 128. The qkv weights are
// scaled by `weight_gain` (get_inputs draws 0.02·N(0,1)): 4 makes the softmax rows of the small
// hidden sizes far from uniform.
tools::TensorSet varlen_inputs(const std::vector<std::int32_t>& lengths, int64_t H, float weight_gain,
                               std::uint64_t seed, tools::Axes& axes) {
  int64_t S = 0;
  for (std::int32_t L : lengths) S += L;
  axes = {{"total_seq_len", S},
          {"num_sequences", static_cast<int64_t>(lengths.size())},
          {"num_heads", H},
          {"head_dim", 128},
          {"hidden_size", H * 128}};
  tools::TensorSet in = tools::generate_inputs(kOp, axes, seed);
  std::int32_t* cu = in.find("cu_seqlens")->data<std::int32_t>();
  cu[0] = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  tools::HostTensor& w = *in.find("qkv_weight");
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] *= weight_gain;
  return in;
}

std::string label_of(const std::vector<std::int32_t>& lengths, int64_t H) {
  std::string s = "lengths";
  for (std::int32_t L : lengths) s += " " + std::to_string(L);
  return s + " H=" + std::to_string(H);
}

TEST(CudaVisionVarlenRope, OddSequenceMixes) {
  ATTNBWD_SEED_TRACE();
  struct Case {
    std::vector<std::int32_t> lengths;
    int64_t H;
  };
  const std::vector<Case> cases = {
      {{131}, 2},
      {{1, 1, 1, 1, 1}, 2},
      {{1, 7, 65, 131}, 2},
      {{0, 7, 0, 0, 13, 1, 0}, 1},
      {{1, 130, 0, 33, 2, 64, 65, 17, 129, 128, 63}, 1},
      {{300, 5}, 1},
  };
  const double atol = smallest_atol(kOp);
  std::uint64_t tag = 0;
  for (const Case& c : cases) {
    tools::Axes axes;
    const tools::TensorSet in = varlen_inputs(c.lengths, c.H, 4.0f, fresh_seed(tag++), axes);
    check(label_of(c.lengths, c.H), in, axes, atol);
  }
}

// Without the caller's host copy of cu_seqlens (dispatch then makes one for validation; the fast
// path reads only the device array either way).
TEST(CudaVisionVarlenRope, OddWithoutHostCuSeqlens) {
  ATTNBWD_SEED_TRACE();
  tools::Axes axes;
  const std::vector<std::int32_t> lengths = {5, 0, 70, 1, 20};
  const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(50), axes);
  check(label_of(lengths, 2) + " no host cu_seqlens", in, axes, smallest_atol(kOp), /*host_cu_seqlens=*/false);
}

// Without the caller's host copy the fast path queues the op's first part (scratch only) before the host has read
// cu_seqlens, and the rest once it has validated it (cuda_backend.hpp, run_begin): the same kernels as the plain path
// (ATTNBWD_CUDA_VARLEN_EARLY=off: copy, wait, validate, run), so the same bits — Default and Strict, S <= 256 (the
// mixed-input QKV kernel on sm_90) and above, three calls each so that graphs are captured and replayed, scratch
// poisoned on every call.
TEST(CudaVisionVarlenRope, EarlyFirstPartGivesThePlainPathsBits) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  std::uint64_t tag = 140;
  for (const auto& lengths : std::vector<std::vector<std::int32_t>>{{131}, {0, 7, 70, 0, 13, 1}, {300, 5, 64}}) {
    tools::Axes axes;
    const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(tag++), axes);
    SCOPED_TRACE(label_of(lengths, 2));
    for (const Precision p : {Precision::Default, Precision::Strict}) {
      HostCase<Args> plain(in, axes);
      {
        const ScopedEnv off("ATTNBWD_CUDA_VARLEN_EARLY", "off");
        run_cuda(plain, p, /*host_cu_seqlens=*/false);
      }
      for (int call = 0; call < 3; ++call) {
        HostCase<Args> early(in, axes);
        run_cuda(early, p, /*host_cu_seqlens=*/false);
        expect_same_bits(early, plain, "early first part vs plain path, call " + std::to_string(call) + ", " +
                                           to_string(p));
      }
    }
  }
}

// An invalid device cu_seqlens without a host copy: the early path has queued the first part when the host finds the
// values wrong, so the Error must still come before any output is written — every output keeps its NaN poison — and
// the next valid call on the same thread (context) must run normally and match the oracle.
TEST(CudaVisionVarlenRope, InvalidDeviceCuSeqlensLeavesEveryOutputUntouched) {
  ATTNBWD_SEED_TRACE();
  tools::Axes axes;
  const std::vector<std::int32_t> lengths = {40, 100, 60};
  const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(160), axes);
  const std::vector<std::vector<std::int32_t>> bad = {{0, 40, 30, 200}, {1, 40, 140, 200}, {0, 40, 140, 199}};
  for (const auto& cu : bad) {
    tools::TensorSet broken = in;
    std::int32_t* c = broken.find("cu_seqlens")->data<std::int32_t>();
    for (std::size_t i = 0; i < cu.size(); ++i) c[i] = cu[i];
    HostCase<Args> got(broken, axes);
    got.args.cu_seqlens_host = nullptr;
    ShiftedArgs<Args> device(got.args, 0);
    const std::vector<std::vector<unsigned char>> before = got.outputs;
    try {
      detail::run(Kokkos::Cuda(), device.args, Options{});
      ADD_FAILURE() << "no Error for cu_seqlens " << cu[0] << "," << cu[1] << "," << cu[2] << "," << cu[3];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cu_seqlens"), std::string::npos) << e.what();
    }
    Kokkos::Cuda().fence();
    device.outputs_to(got.args);
    for (std::size_t i = 0; i < got.outputs.size(); ++i)
      EXPECT_TRUE(got.outputs[i] == before[i]) << "output " << i << " was written before the Error";
  }
  check(label_of(lengths, 2) + " after the refused calls", in, axes, smallest_atol(kOp), /*host_cu_seqlens=*/false);
}

// Tensors 4 bytes past 16-byte alignment (cuBLASLt's unaligned algorithms, the scalar fp16
// conversion); and the Default mode's variants: TF32 GEMMs and attention (ATTNBWD_CUDA_FP32_GEMM=tf32),
// fp16 GEMMs with TF32 attention (ATTNBWD_CUDA_VARLEN_ATTN=tf32).
TEST(CudaVisionVarlenRope, OddUnalignedAndTf32Variant) {
  ATTNBWD_SEED_TRACE();
  tools::Axes axes;
  const std::vector<std::int32_t> lengths = {1, 66, 0, 30};
  const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(70), axes);
  check(label_of(lengths, 2) + " offset 4", in, axes, smallest_atol(kOp), true, 4);
  {
    const ScopedEnv env("ATTNBWD_CUDA_FP32_GEMM", "tf32");
    check(label_of(lengths, 2) + " tf32 GEMMs", in, axes, smallest_atol(kOp));
  }
  const ScopedEnv env("ATTNBWD_CUDA_VARLEN_ATTN", "tf32");
  check(label_of(lengths, 2) + " fp16 GEMMs, tf32 attention", in, axes, smallest_atol(kOp));
}

// A variant switch's check (the switch set by the caller): `mixes` of odd sequence lengths (H = 2), then
// {1, 66, 0, 30} with every tensor 4 bytes past 16-byte alignment; `what` names the variant in the labels,
// `tag` numbers the fresh seeds.
void check_variant_on_odd_mixes(const std::string& what, const std::vector<std::vector<std::int32_t>>& mixes,
                                std::uint64_t& tag) {
  for (const auto& lengths : mixes) {
    tools::Axes axes;
    const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(tag++), axes);
    check(label_of(lengths, 2) + " " + what, in, axes, smallest_atol(kOp));
  }
  tools::Axes axes;
  const std::vector<std::int32_t> lengths = {1, 66, 0, 30};
  const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(tag++), axes);
  check(label_of(lengths, 2) + " " + what + " offset 4", in, axes, smallest_atol(kOp), true, 4);
}

// Cases for the bit-equality tests: an odd mix of 7 sequences (empty and length-1 ones, H = 2) and the named workloads.
using Cases = std::vector<std::pair<std::string, std::pair<tools::TensorSet, tools::Axes>>>;
Cases odd_mix_and_workloads(std::uint64_t tag, std::initializer_list<const char*> workloads) {
  const std::vector<std::int32_t> mix = {1, 130, 0, 33, 2, 64, 65};
  Cases cases;
  tools::Axes axes;
  tools::TensorSet in = varlen_inputs(mix, 2, 4.0f, fresh_seed(tag++), axes);
  cases.push_back({label_of(mix, 2), {std::move(in), axes}});
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  for (const char* index : workloads) {
    const tools::Workload& w = tools::find_workload(all, index);
    cases.push_back({std::string("workload ") + index,
                     {tools::generate_inputs(kOp, w.axes, fresh_seed(tag++), w.scalars), w.axes}});
  }
  return cases;
}

// Every case in Default and Strict (with `both_copies` also without cu_seqlens' host copy: the early first part) run
// with `env` = a and with `env` = b: every output must have the same bits.
void expect_same_bits_under(const Cases& cases, const char* env, const char* a, const char* b, const std::string& what,
                            bool both_copies = false) {
  for (const auto& [label, c] : cases)
    for (const Precision p : {Precision::Default, Precision::Strict})
      for (const bool host_cu : {true, false}) {
        if (!host_cu && !both_copies) continue;
        HostCase<Args> first(c.first, c.second), second(c.first, c.second);
        {
          const ScopedEnv e(env, a);
          run_cuda(first, p, host_cu);
        }
        {
          const ScopedEnv e(env, b);
          run_cuda(second, p, host_cu);
        }
        expect_same_bits(first, second,
                         what + ", " + label + ", " + to_string(p) + (host_cu ? "" : ", device cu_seqlens only"));
      }
}

// ATTNBWD_CUDA_VARLEN_DQKV: fp16 (the default since 2026-12-01: the fp16-tile dQ and dK/dV kernels write
// dQKV in fp16 and per-CTA column sums for grad_qkv_bias, with zero rows for the unused block slots, which
// every case here has: block_slots = ⌈S/64⌉ + n) and fp32 (fp32 dQKV + conversion + column-sum passes,
// kept for A/B), each on the same odd sequence mixes, with 4-byte-misaligned tensors too.
TEST(CudaVisionVarlenRope, DqkvVariantsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  for (const char* dqkv : {"fp16", "fp32"}) {
    SCOPED_TRACE(std::string("ATTNBWD_CUDA_VARLEN_DQKV=") + dqkv);
    const ScopedEnv env("ATTNBWD_CUDA_VARLEN_DQKV", dqkv);
    std::uint64_t tag = 80;
    check_variant_on_odd_mixes(
        std::string(dqkv) + " dQKV",
        {{131}, {1, 1, 1, 1, 1}, {0, 7, 0, 0, 13, 1, 0}, {1, 130, 0, 33, 2, 64, 65, 17, 129, 128, 63}}, tag);
  }
}

// ATTNBWD_CUDA_VARLEN_BIASROPE: the one-block-per-token bias + RoPE kernel (vec), its form with one task per thread
// (vec1, the default since the forty-sixth session) and the element-pair kernel (scalar), fp16 output in Default and in place in Strict, on odd
// sequence mixes and (vec and vec1 falling back to the element-pair kernel) on 4-byte-misaligned tensors.
TEST(CudaVisionVarlenRope, BiasRopeVariantsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  std::uint64_t tag = 90;
  for (const char* variant : {"vec", "vec1", "scalar"}) {
    const ScopedEnv env("ATTNBWD_CUDA_VARLEN_BIASROPE", variant);
    check_variant_on_odd_mixes(std::string(variant) + " bias+RoPE",
                               {{131}, {1, 1, 1, 1, 1}, {1, 130, 0, 33, 2, 64, 65, 17}}, tag);
  }
}

// ATTNBWD_CUDA_VARLEN_BIASROPE=vec1 (one task per thread, grid y over a token's blocks of 256 tasks) does each element's
// math of vec (a loop per token): the same bits, in Default (the mixed QKV kernel's fp32 result into the fp16 QKV at
// workload #8's S = 131 and 28 heads: six blocks per token, the last part-filled; lt16's in-place fp16 at #12) and in
// Strict (in place on fp32), and on an odd mix of 2 heads (one block per token).
TEST(CudaVisionVarlenRope, BiasRopeOneTaskPerThreadGivesTheLoopsBits) {
  ATTNBWD_SEED_TRACE();
  expect_same_bits_under(odd_mix_and_workloads(175, {"8", "12"}), "ATTNBWD_CUDA_VARLEN_BIASROPE", "vec", "vec1",
                         "bias + RoPE vec vs vec1");
}

// ATTNBWD_CUDA_VARLEN_TABLE=side (the default since the forty-sixth session): the block table built on the side stream
// after its conversions instead of on the main stream between the QKV projection and bias + RoPE (main); only the attention reads it, after stage 1's join: the same bits,
// with the scratch poisoned before every call, in Default and Strict, with cu_seqlens' host copy and without it (the
// early first part), on an odd mix of 7 sequences (empty and length-1 ones) and workload #8. (A missing join would
// show only if the attention overtook the ~3.5 µs table kernel, which the main stream's QKV projection and bias + RoPE
// before it make unlikely: this test checks the table's contents and the bits, not the ordering.)
TEST(CudaVisionVarlenRope, BlockTableOnEitherStreamGivesTheSameBits) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  expect_same_bits_under(odd_mix_and_workloads(180, {"8"}), "ATTNBWD_CUDA_VARLEN_TABLE", "main", "side",
                         "block table on the main vs the side stream", /*both_copies=*/true);
}

// ATTNBWD_CUDA_VARLEN_BWD=one (the default): the fp16-tile dQ and dK/dV CTAs in one launch (grid z = 2) run the same code on
// disjoint outputs, so every output has the two launches' bits — with fp16 dQKV and per-CTA column sums (the default)
// and with fp32 dQKV, on odd mixes (empty and length-1 sequences, tails, more CTAs than one wave holds: 300 blocks of
// 8 heads) and on 4-byte-misaligned tensors. Strict runs other kernels (3xTF32); there the switch is ignored. The
// op's scratch (dQKV, the column-sum rows) is set to 0xff before every call, so CTAs the one launch leaves out show
// as NaN instead of the two launches' bits from the run before. On an sm_90 device both kernel families: mma.sync
// (ATTNBWD_CUDA_VARLEN_WGMMA=off) and wgmma (bwd: attn_bwd_wg against attn_dq_wg then attn_dkv_wg).
TEST(CudaVisionVarlenRope, OneBackwardLaunchGivesTheTwoLaunchesBits) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  const std::vector<const char*> families =
      is_sm90() ? std::vector<const char*>{"off", "bwd"} : std::vector<const char*>{"auto"};
  std::uint64_t tag = 95;
  std::vector<std::int32_t> many(60, 300);
  for (const auto& lengths : std::vector<std::vector<std::int32_t>>{{131}, {0, 7, 0, 0, 13, 1, 0},
                                                                  {1, 130, 0, 33, 2, 64, 65, 17, 129, 128, 63}, many}) {
    tools::Axes axes;
    const std::int64_t H = lengths.size() == many.size() ? 8 : 2;
    const tools::TensorSet in = varlen_inputs(lengths, H, 4.0f, fresh_seed(tag++), axes);
    SCOPED_TRACE(lengths.size() == many.size() ? "60 sequences of 300, H=8" : label_of(lengths, H));
    for (const char* family : families) {
      const ScopedEnv wg("ATTNBWD_CUDA_VARLEN_WGMMA", family);
      for (const char* dqkv : {"fp16", "fp32"}) {
        const ScopedEnv env("ATTNBWD_CUDA_VARLEN_DQKV", dqkv);
        for (const std::size_t offset : {std::size_t{0}, std::size_t{4}}) {
          for (const Precision p : {Precision::Default, Precision::Strict}) {
            if (p == Precision::Strict && family != families.front()) continue;  // Strict ignores both switches
            HostCase<Args> two(in, axes), one(in, axes);
            {
              const ScopedEnv bwd("ATTNBWD_CUDA_VARLEN_BWD", "two");
              run_cuda(two, p, true, offset);
            }
            {
              const ScopedEnv bwd("ATTNBWD_CUDA_VARLEN_BWD", "one");
              run_cuda(one, p, true, offset);
            }
            expect_same_bits(one, two, std::string("one launch vs two, WGMMA=") + family + ", " + dqkv +
                                           " dQKV, offset " + std::to_string(offset) + ", " + to_string(p));
          }
        }
      }
    }
  }
}

// ATTNBWD_CUDA_STREAMS=one: the side-stream work (dAO, the two weight gradients, grad_proj_bias) on the
// caller's stream after the main stream's work instead of beside it: the same kernels on the same inputs, so every
// output has the two-stream bits — Default and Strict, an odd mix and workload #1 (28 heads), scratch poisoned.
// (That the switch takes effect is CudaStreams.StreamsSwitchPutsTheSideWorkOnTheCallersStream.)
TEST(CudaVisionVarlenRope, OneStreamGivesTheTwoStreamsBits) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  expect_same_bits_under(odd_mix_and_workloads(170, {"1"}), "ATTNBWD_CUDA_STREAMS", "two", "one", "one stream vs two");
}

// ATTNBWD_CUDA_VARLEN_WGMMA=off|dq|dkv|fwd|all (sm_90 only; auto = all there, so the other tests run the wgmma kernels
// on an sm_90 device): the mma.sync kernels (off) and the dQ, dK/dV and forward kernels on wgmma
// (vision_varlen_rope_backward_attn_sm90.cu), their products in another order than the mma.sync kernels', against
// the oracle on odd mixes (empty and length-1 sequences, tails of every size around the 64-token blocks, a sequence
// of 300 = 5 blocks) and misaligned tensors, with fp16 dQKV (the default) and fp32 dQKV; Strict ignores the switch.
// Elsewhere a wgmma form is an Error.
TEST(CudaVisionVarlenRope, WgmmaVariantsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels need an sm_90 device";
  std::uint64_t tag = 140;
  for (const char* form : {"off", "dq", "dkv", "fwd", "all"}) {
    const ScopedEnv env("ATTNBWD_CUDA_VARLEN_WGMMA", form);
    for (const char* dqkv : {"fp16", "fp32"}) {
      const ScopedEnv d("ATTNBWD_CUDA_VARLEN_DQKV", dqkv);
      check_variant_on_odd_mixes(std::string("wgmma ") + form + ", " + dqkv + " dQKV",
                                 {{131}, {1, 1, 1, 1, 1}, {0, 7, 0, 0, 13, 1, 0},
                                  {1, 130, 0, 33, 2, 64, 65, 17, 129, 128, 63}, {300}},
                                 tag);
    }
  }
}

// Two runs of the fast path that form the same fp16 products in another order or from other tiles: every output
// agrees to rel-L2 ≤ 2e-3, five times tighter than the oracle bound of the Default mode (1e-2).
void expect_agree(const HostCase<Args>& a, const HostCase<Args>& b, const std::string& what) {
  const auto g = outputs_of(a.args), w = outputs_of(b.args);
  ASSERT_EQ(g.size(), 5u);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto r = close(g[i].name, g[i].data, w[i].data, g[i].size, Tolerance{0.0, 0.0, 0.0, 2e-3});
    std::printf("[ measured ] %s: %s\n", what.c_str(), r.message());
    EXPECT_TRUE(r) << what;
  }
}

// Default's mma.sync fp16 attention kernels (ATTNBWD_CUDA_VARLEN_WGMMA=off; fp16 inputs copied by cp.async into
// double-buffered fp16 tiles, ldmatrix, P and dS in registers) against the older fp32-tile kernels
// (ATTNBWD_CUDA_VARLEN_ATTN=fp16-v1), which form the same fp16 products in the same k order; the row term delta = Σ
// dO·O now uses the fp16 dO the products use (v1: fp32 dO). On odd mixes (tails, empty and length-1 sequences, 5 key
// blocks) and workload #1 every output agrees to rel-L2 ≤ 2e-3, five times tighter than the oracle bound of the mode
// (1e-2).
TEST(CudaVisionVarlenRope, Fp16TileKernelsAgreeWithV1) {
  ATTNBWD_SEED_TRACE();
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  const tools::Workload& w1 = tools::find_workload(all, "1");
  std::vector<std::pair<std::string, std::pair<tools::TensorSet, tools::Axes>>> cases;
  for (const std::vector<std::int32_t>& lengths :
       {std::vector<std::int32_t>{1, 7, 65, 131}, std::vector<std::int32_t>{0, 300, 1, 0, 64, 63}}) {
    tools::Axes axes;
    tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(80 + lengths.size()), axes);
    cases.push_back({label_of(lengths, 2), {std::move(in), axes}});
  }
  cases.push_back({"workload 1", {tools::generate_inputs(kOp, w1.axes, fresh_seed(90), w1.scalars), w1.axes}});
  for (const auto& [label, c] : cases) {
    HostCase<Args> now(c.first, c.second), v1(c.first, c.second);
    {
      const ScopedEnv env("ATTNBWD_CUDA_VARLEN_WGMMA", "off");
      run_cuda(now, Precision::Default);
    }
    {
      const ScopedEnv env("ATTNBWD_CUDA_VARLEN_ATTN", "fp16-v1");
      run_cuda(v1, Precision::Default);
    }
    expect_agree(now, v1, "fp16 tiles vs fp16-v1, " + label);
  }
}

// ATTNBWD_CUDA_VARLEN_WGMMA=dq|dkv|fwd|all against the mma.sync kernels on the same inputs (sm_90 only): the same fp16
// products summed in another order, so every output agrees to rel-L2 ≤ 2e-3 (five times tighter than the oracle
// bound), on tails of every size, empty and length-1 sequences, 5 key blocks and workload #1 (28 heads). The op's
// scratch is poisoned (0xff) before every call, so rows a kernel leaves unwritten show as NaN.
TEST(CudaVisionVarlenRope, WgmmaAgreesWithMma) {
  ATTNBWD_SEED_TRACE();
  if (!is_sm90()) GTEST_SKIP() << "the wgmma kernels need an sm_90 device";
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  const tools::Workload& w1 = tools::find_workload(all, "1");
  std::vector<std::pair<std::string, std::pair<tools::TensorSet, tools::Axes>>> cases;
  for (const std::vector<std::int32_t>& lengths :
       {std::vector<std::int32_t>{1, 7, 65, 131}, std::vector<std::int32_t>{0, 300, 1, 0, 64, 63},
        std::vector<std::int32_t>{127, 129, 2, 191}}) {
    tools::Axes axes;
    tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(150 + lengths.size()), axes);
    cases.push_back({label_of(lengths, 2), {std::move(in), axes}});
  }
  cases.push_back({"workload 1", {tools::generate_inputs(kOp, w1.axes, fresh_seed(160), w1.scalars), w1.axes}});
  for (const auto& [label, c] : cases) {
    HostCase<Args> mma(c.first, c.second);
    {
      const ScopedEnv env("ATTNBWD_CUDA_VARLEN_WGMMA", "off");
      run_cuda(mma, Precision::Default);
    }
    for (const char* form : {"dq", "dkv", "fwd", "all"}) {
      HostCase<Args> wg(c.first, c.second);
      {
        const ScopedEnv env("ATTNBWD_CUDA_VARLEN_WGMMA", form);
        run_cuda(wg, Precision::Default);
      }
      expect_agree(wg, mma, std::string("wgmma ") + form + " vs mma.sync, " + label);
    }
  }
}

// ATTNBWD_CUDA_VARLEN_QKV=mixed: the QKV projection as the mixed-input kernel (the fp32 Wqkv read and rounded to
// fp16 in the kernel, which also writes the fp16 copy that dX's GEMM reads; sm_90 only) against the oracle (Default
// and Strict, where the switch does not apply) on S = 1 and S = 96 (M ≤ 128: MB = 1), 131, 204 and 256 (MB = 2), 300
// (MB = 3: two A boxes per k-block) and 385, 512 (MB = 4) with empty and length-1 sequences, S = 100 and 300 at 8
// heads (the rings wrap), and on workloads #8, #1 and #0 at their own atol (28 heads: 112 CTAs); against the cuBLASLt
// path (lt) to rel-L2 ≤ 2e-3 on the same inputs. The op's scratch is poisoned before every call, so an element the
// kernel leaves unwritten (its output, or the fp16 weight copy) shows as NaN. S = 513 and 4-byte-misaligned tensors
// are an Error naming the switch.
TEST(CudaVisionVarlenRope, MixedQkvMatchesTheOracle) {
  ATTNBWD_SEED_TRACE();
  if (!is_sm90()) GTEST_SKIP() << "the mixed-input kernel needs an sm_90 device";
  const char* const env = "ATTNBWD_CUDA_VARLEN_QKV";
  std::uint64_t tag = 190;
  const ScopedEnv poison("ATTNBWD_CUDA_SCRATCH", "poison");
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  std::vector<std::tuple<std::string, tools::TensorSet, tools::Axes, double>> cases;
  for (const std::vector<std::int32_t>& lengths :
       {std::vector<std::int32_t>{1}, std::vector<std::int32_t>{5, 0, 70, 1, 20}, std::vector<std::int32_t>{131},
        std::vector<std::int32_t>{1, 7, 65, 131}, std::vector<std::int32_t>{0, 128, 128, 0},
        std::vector<std::int32_t>{1, 299}, std::vector<std::int32_t>{200, 0, 185}, std::vector<std::int32_t>{512}}) {
    tools::Axes axes;
    tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(tag++), axes);
    cases.emplace_back(label_of(lengths, 2), std::move(in), axes, smallest_atol(kOp));
  }
  // 8 heads (K = 1024: 16 k-blocks), so the W and A rings wrap at MB = 1 and MB = 3 too (at 2 heads they hold all
  // 4 k-blocks; the workloads, at 56, cover MB = 2 and 4). Weight gain 2, not 4: the logits spread with hidden · gain²,
  // so this keeps the logits at the 2-head cases' scale (at gain 4 the softmax rows are near one-hot and the fp16
  // Default path, cuBLASLt as well as the mixed kernel, misses the oracle's absolute tolerance).
  for (const std::vector<std::int32_t>& lengths :
       {std::vector<std::int32_t>{100}, std::vector<std::int32_t>{150, 0, 150}}) {
    tools::Axes axes;
    tools::TensorSet in = varlen_inputs(lengths, 8, 2.0f, fresh_seed(tag++), axes);
    cases.emplace_back(label_of(lengths, 8), std::move(in), axes, smallest_atol(kOp));
  }
  for (const char* index : {"8", "1", "0"}) {
    const tools::Workload& w = tools::find_workload(all, index);
    cases.emplace_back("workload " + std::string(index),
                       tools::generate_inputs(kOp, w.axes, fresh_seed(tag++), w.scalars), w.axes, w.atol);
  }
  for (const auto& [label, in, axes, atol] : cases) {
    const Oracle<Args> want(in, axes);
    {
      const ScopedEnv mixed(env, "mixed");
      check_against(want, label + " " + env + "=mixed", in, axes, atol);
    }
    HostCase<Args> lt(in, axes), mixed(in, axes);
    {
      const ScopedEnv e(env, "lt");
      run_cuda(lt, Precision::Default);
    }
    {
      const ScopedEnv e(env, "mixed");
      run_cuda(mixed, Precision::Default);
    }
    expect_agree(mixed, lt, std::string(env) + " mixed vs cuBLASLt, " + label);
  }
  const ScopedEnv e(env, "mixed");
  for (const auto& [lengths, offset] : {std::pair<std::vector<std::int32_t>, std::size_t>{{513}, 0},
                                        std::pair<std::vector<std::int32_t>, std::size_t>{{1, 66, 0, 30}, 4}}) {
    tools::Axes axes;
    const tools::TensorSet in = varlen_inputs(lengths, 2, 4.0f, fresh_seed(tag++), axes);
    HostCase<Args> got(in, axes);
    try {
      run_cuda(got, Precision::Default, true, offset);
      ADD_FAILURE() << label_of(lengths, 2) << " offset " << offset << ": no Error";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(env), std::string::npos) << err.what();
    }
  }
}

// ATTNBWD_CUDA_VARLEN_QKV=lt16: the QKV GEMM's fp16 result written into the attention kernels' fp16 QKV, bias + RoPE
// in place on it (the one-block-per-token kernel and, with 4-byte-misaligned tensors or BIASROPE=scalar, the
// element-pair kernel), on odd mixes, then at two workloads' full size (#8: one sequence of 131, where auto takes the
// mixed kernel; #12: 373 tokens in three sequences).
TEST(CudaVisionVarlenRope, Lt16QkvMatchesTheOracle) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv env("ATTNBWD_CUDA_VARLEN_QKV", "lt16");
  std::uint64_t tag = 97;
  for (const char* variant : {"vec", "vec1", "scalar"}) {
    const ScopedEnv br("ATTNBWD_CUDA_VARLEN_BIASROPE", variant);
    check_variant_on_odd_mixes(std::string("lt16 QKV, ") + variant + " bias+RoPE",
                               {{131}, {1, 1, 1, 1, 1}, {1, 130, 0, 33, 2, 64, 65, 17}}, tag);
  }
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  for (const char* index : {"8", "12"}) {
    const tools::Workload& w = tools::find_workload(all, index);
    const tools::TensorSet in = tools::generate_inputs(kOp, w.axes, fresh_seed(120 + w.index), w.scalars);
    const Oracle<Args> want(in, w.axes);
    check_against(want, "workload " + std::string(index) + " " + w.uuid + " lt16 QKV", in, w.axes, w.atol);
  }
}

// ATTNBWD_CUDA_LT_TUNE: every cuBLASLt GEMM the fastest of up to 16 candidates timed at its first call, on odd
// mixes and on workload #12 (S = 373: the cuBLASLt QKV, dX and weight-gradient GEMMs at the model's width).
TEST(CudaVisionVarlenRope, TunedGemmsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  const ScopedEnv env("ATTNBWD_CUDA_LT_TUNE", "verbose");
  std::uint64_t tag = 150;
  check_variant_on_odd_mixes("tuned GEMMs", {{131}, {1, 130, 0, 33, 2, 64, 65, 17}}, tag);
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  const tools::Workload& w = tools::find_workload(all, "12");
  const tools::TensorSet in = tools::generate_inputs(kOp, w.axes, fresh_seed(150 + w.index), w.scalars);
  const Oracle<Args> want(in, w.axes);
  check_against(want, "workload 12 " + w.uuid + " tuned GEMMs", in, w.axes, w.atol);
  check_against(want, "workload 12 " + w.uuid + " tuned GEMMs, again", in, w.axes, w.atol);
}

TEST(CudaVisionVarlenRope, RealWorkloadsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  for (const char* index : {"8", "1"}) {
    const tools::Workload& w = tools::find_workload(all, index);
    const tools::TensorSet in = tools::generate_inputs(kOp, w.axes, fresh_seed(100 + w.index), w.scalars);
    const Oracle<Args> want(in, w.axes);
    check_against(want, "workload " + std::string(index) + " " + w.uuid, in, w.axes, w.atol);
    if (is_sm90()) {  // the wgmma forward, dQ and dK/dV kernels at the workload's 28 heads of 128
      const ScopedEnv env("ATTNBWD_CUDA_VARLEN_WGMMA", "all");
      check_against(want, "workload " + std::string(index) + " " + w.uuid + " wgmma forward, dQ, dK/dV", in, w.axes, w.atol);
    }
  }
}

}  // namespace
}  // namespace attnbwd::test

#endif
