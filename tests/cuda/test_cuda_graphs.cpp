// CUDA graphs in the fast path (ATTNBWD_CUDA_GRAPHS=auto, the default, and 1; Context::enqueue): the first call of
// a key runs directly, the second is captured and launched, later ones replay; every one must give the bits of a
// call without graphs (ATTNBWD_CUDA_GRAPHS=0), with the outputs poisoned before each call (a replay that skipped a
// kernel would leave NaN). A larger problem in between grows the scratch, which must invalidate the captured graphs
// (they hold its old address): the small problem again must still be right. The cache's bounds: buffers that move
// every call are never captured, a cycle of more recurring keys than the cache holds stops the capturing, and a
// variable outside the op's key still separates keys; out_proj, and varlen beyond 1536 tokens, are captured only when
// asked for; varlen's replays read the sequence boundaries of each call.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "cuda/context.hpp"
#include "tests/common/cuda_case.hpp"
#include "tests/common/scoped_env.hpp"

namespace attnbwd::test {
namespace {

// Fresh inputs of `op` at `axes` and the result of `runs` calls with graphs off (ATTNBWD_CUDA_GRAPHS=0): what every
// call with graphs must give.
template <class Args>
struct GraphsOffResult {
  GraphsOffResult(const char* op, const tools::Axes& given, std::uint64_t seed, int runs = 1)
      : axes(given), in(tools::generate_inputs(op, axes, seed, tools::default_scalars(op))), want(in, axes) {
    const ScopedEnv off("ATTNBWD_CUDA_GRAPHS", "0");
    for (int i = 0; i < runs; ++i) want.run();
  }
  const tools::Axes axes;
  const tools::TensorSet in;
  CudaCase<Args> want;
};

// Runs `small` four times in the graph mode `mode` ("auto": the variable unset, or "1"), a larger problem between
// (the scratch grows), then `small` three more times: every call's bits as with graphs off, no capture failed.
template <class Args>
void replays_match_in(const char* mode, const char* op, const tools::Axes& small, const tools::Axes& large,
                      std::uint64_t seed) {
  SCOPED_TRACE(std::string(op) + " " + tools::axes_to_string(small) + " ATTNBWD_CUDA_GRAPHS=" + mode);
  const GraphsOffResult<Args> ref(op, small, seed, 2);  // graphs off: the second call runs directly too
  const tools::TensorSet& in = ref.in;
  const CudaCase<Args>& want = ref.want;
  std::unique_ptr<ScopedEnv> on;
  if (std::string(mode) != "auto") on = std::make_unique<ScopedEnv>("ATTNBWD_CUDA_GRAPHS", mode);
  cuda::Context::current().reset_graphs();  // no failure left from before (GraphStats::failure)
  CudaCase<Args> got(in, small);
  for (const char* what : {"first call (direct)", "second call (captured)", "third call (replayed)", "fourth call"}) {
    got.run();
    expect_same_bits(got.result(), want.result(), what);
  }
  // A failed capture falls back to direct calls, whose bits match too: only the recorded cause shows it.
  EXPECT_EQ(cuda::Context::current().graph_stats().failure, "");
  // A larger problem grows the scratch; the small one's graph must not be replayed on the old one.
  const tools::TensorSet big_in = tools::generate_inputs(op, large, seed + 1, tools::default_scalars(op));
  CudaCase<Args> big(big_in, large);
  big.run();
  big.run();
  for (const char* what : {"after growth, first", "after growth, second", "after growth, third"}) {
    got.run();
    expect_same_bits(got.result(), want.result(), what);
  }
  EXPECT_EQ(cuda::Context::current().graph_stats().failure, "");
}

template <class Args>
void replays_match(const char* op, const tools::Axes& small, const tools::Axes& large, std::uint64_t seed) {
  for (const char* mode : {"auto", "1"}) replays_match_in<Args>(mode, op, small, large, seed);
}

TEST(CudaGraphs, OutProjReplaysGiveTheSameBits) {
  ATTNBWD_SEED_TRACE();
  // T = 256 uses split-K (workspace and arrival counters) on sm_90, T = 1024 does not.
  replays_match<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}},
                             {{"batch_size", 4}, {"seq_len", 512}}, fresh_seed(800));
  replays_match<OutProjArgs>("out_proj_backward", {{"batch_size", 2}, {"seq_len", 512}},
                             {{"batch_size", 8}, {"seq_len", 512}}, fresh_seed(801));
}

TEST(CudaGraphs, GqaRopeReplaysGiveTheSameBits) {
  ATTNBWD_SEED_TRACE();
  const auto axes = [](std::int64_t S) {
    return tools::Axes{{"batch_size", 1},         {"seq_len", S},   {"num_attention_heads", 8},
                       {"num_key_value_heads", 2}, {"head_dim", 128}, {"hidden_size", 64}};
  };
  replays_match<GqaRopeArgs>("gqa_rope_backward", axes(131), axes(400), fresh_seed(802));
  // Workload #5's shape (T = 131, hidden 5120) on sm_90: the thin q/k/v launch whose dX partials are summed by a
  // programmatic dependent launch, captured and replayed; then T = 200 (the thin launch with four row blocks).
  const auto wide = [](std::int64_t S) {
    return tools::Axes{{"batch_size", 1},         {"seq_len", S},   {"num_attention_heads", 32},
                       {"num_key_value_heads", 8}, {"head_dim", 128}, {"hidden_size", 5120}};
  };
  replays_match<GqaRopeArgs>("gqa_rope_backward", wide(131), wide(200), fresh_seed(805));
  // T > 512: grad_o_weight late on the side stream with the main stream's partial join (an event recorded on the side
  // stream mid-way and waited on later) and the grouped dK/dV GEMMs, captured and replayed; B = 2 (dO copied, dV
  // grouped) then B = 1 at S = 1024 (the key-major kernel's path with late dWo).
  const auto two = [](std::int64_t B, std::int64_t S) {
    return tools::Axes{{"batch_size", B},         {"seq_len", S},   {"num_attention_heads", 8},
                       {"num_key_value_heads", 2}, {"head_dim", 128}, {"hidden_size", 64}};
  };
  replays_match<GqaRopeArgs>("gqa_rope_backward", two(2, 300), two(1, 1024), fresh_seed(813));
  // The q/k/v dX as one grouped dX-only sm_90a launch beside cuBLASLt's weight gradients on the side stream (auto from
  // T = 2048 at Mistral's sizes), forced at these shapes: captured and replayed.
  if (is_sm90()) {
    const ScopedEnv gdx("ATTNBWD_CUDA_GQA_QKV", "groupeddx");
    replays_match<GqaRopeArgs>("gqa_rope_backward", two(2, 300), two(1, 1024), fresh_seed(814));
  }
}

TEST(CudaGraphs, VisionMhaNormReplaysGiveTheSameBits) {
  ATTNBWD_SEED_TRACE();
  const auto axes = [](std::int64_t S) {
    return tools::Axes{{"batch_size", 2}, {"seq_len", S}, {"num_heads", 2}, {"head_dim", 64}, {"embed_dim", 128}};
  };
  replays_match<VisionMhaArgs>("vision_mha_norm_backward", axes(65), axes(300), fresh_seed(803));
  // The fused attention launch (sm_90; S = 577: tails and one-block CTAs): replayed, its ticket must start at zero
  // each time (a ticket left set would map CTAs past the work: wrong bits or a hang). The counters themselves are
  // checked in CudaVisionMhaNorm.FusedLaunchGivesTheSerialBitsAtEveryLag.
  const ScopedEnv fused("ATTNBWD_CUDA_MHA_FUSED", "on");
  if (is_sm90()) replays_match<VisionMhaArgs>("vision_mha_norm_backward", axes(577), axes(300), fresh_seed(804));
}

TEST(CudaGraphs, VisionVarlenRopeReplaysGiveTheSameBits) {
  ATTNBWD_SEED_TRACE();
  const auto axes = [](std::int64_t S, std::int64_t n) {
    tools::Axes a = small_varlen_axes();
    a["total_seq_len"] = S;
    a["num_sequences"] = n;
    return a;
  };
  replays_match<VisionVarlenArgs>("vision_varlen_rope_backward", axes(200, 3), axes(700, 2), fresh_seed(809));
  // Workload #8's shape (S = 131, one sequence, the definition's 16 heads) on sm_90: the mixed-input QKV kernel and
  // the side-stream GEMMs, captured and replayed.
  if (is_sm90())
    replays_match<VisionVarlenArgs>("vision_varlen_rope_backward", {{"total_seq_len", 131}, {"num_sequences", 1}},
                                    {{"total_seq_len", 392}, {"num_sequences", 2}}, fresh_seed(810));
}

// varlen's key holds cu_seqlens' address, not its values (the kernels read the boundaries from the device array on
// every call). New boundaries written into the same array must therefore be honoured by a replayed graph: the call
// after the write gives the bits of a graphs-off call on the new boundaries, not the old ones. `host_copy`: the caller
// passes cu_seqlens_host (one graph per key); else the early path (cuda_backend.hpp, run_begin: two parts, two graphs,
// the host reading the device array on every call).
void varlen_replay_reads_the_boundaries(bool host_copy, std::uint64_t seed) {
  const std::size_t parts = host_copy ? 1u : 2u;
  const GraphsOffResult<VisionVarlenArgs> old_ref("vision_varlen_rope_backward", small_varlen_axes(), seed);
  // The same inputs with other boundaries (the same S and n: the same key): [0, 17, 150, 200] instead of the even
  // split [0, 67, 134, 200].
  tools::TensorSet moved = old_ref.in;
  std::int32_t* cu = moved.find("cu_seqlens")->data<std::int32_t>();
  ASSERT_EQ(moved.find("cu_seqlens")->numel(), 4);
  ASSERT_EQ(cu[3], 200);
  ASSERT_NE(cu[1], 17);
  cu[1] = 17, cu[2] = 150;
  CudaCase<VisionVarlenArgs> new_want(moved, small_varlen_axes());
  {
    const ScopedEnv off("ATTNBWD_CUDA_GRAPHS", "0");
    new_want.run();
  }
  ASSERT_FALSE(new_want.result().outputs == old_ref.want.result().outputs);  // the boundaries matter

  cuda::Context& ctx = cuda::Context::current();
  ctx.reset_graphs();
  CudaCase<VisionVarlenArgs> got(old_ref.in, small_varlen_axes());
  VisionVarlenArgs& dev = got.device_args();
  if (!host_copy) dev.cu_seqlens_host = nullptr;
  for (const char* what : {"direct", "captured", "replayed"}) {
    got.run();
    expect_same_bits(got.result(), old_ref.want.result(), std::string("old boundaries, ") + what);
  }
  ASSERT_EQ(ctx.graph_stats().graphs, parts);
  ASSERT_EQ(cudaMemcpy(const_cast<std::int32_t*>(dev.cu_seqlens.data), cu, 4 * sizeof(std::int32_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  if (host_copy) dev.cu_seqlens_host = cu;
  for (const char* what : {"first replay", "second replay"}) {
    got.run();
    expect_same_bits(got.result(), new_want.result(), std::string("new boundaries, ") + what);
  }
  const cuda::Context::GraphStats st = ctx.graph_stats();
  EXPECT_EQ(st.keys, parts);  // the same key(s) throughout: the new boundaries were replayed, not captured anew
  EXPECT_EQ(st.graphs, parts);
  ctx.reset_graphs();
}

TEST(CudaGraphs, VisionVarlenReplayReadsTheBoundariesOfEachCall) {
  ATTNBWD_SEED_TRACE();
  varlen_replay_reads_the_boundaries(/*host_copy=*/true, fresh_seed(811));
}

TEST(CudaGraphs, VisionVarlenEarlyPartReplayReadsTheBoundariesOfEachCall) {
  ATTNBWD_SEED_TRACE();
  varlen_replay_reads_the_boundaries(/*host_copy=*/false, fresh_seed(812));
}

// A tiny gqa problem (one fast-path call is a few short kernels) for the cache-bound tests below.
GraphsOffResult<GqaRopeArgs> tiny_gqa(std::uint64_t seed) {
  return GraphsOffResult<GqaRopeArgs>("gqa_rope_backward",
                                      {{"batch_size", 1},
                                       {"seq_len", 7},
                                       {"num_attention_heads", 4},
                                       {"num_key_value_heads", 1},
                                       {"head_dim", 128},
                                       {"hidden_size", 64}},
                                      seed);
}

// Fresh buffers on every call (a caching allocator may hand out new addresses each time) add keys seen once only:
// nothing is captured, the keys stay within the cache's bound, and the results are right. A key that recurs is
// captured; a variable outside the op's own key (any ATTNBWD_* one) gives a key of its own.
TEST(CudaGraphs, MovingBuffersAreNeverCapturedAndEveryVariableSeparatesKeys) {
  ATTNBWD_SEED_TRACE();
  const GraphsOffResult<GqaRopeArgs> ref = tiny_gqa(fresh_seed(806));
  const tools::Axes& axes = ref.axes;
  const tools::TensorSet& in = ref.in;
  const CudaCase<GqaRopeArgs>& want = ref.want;
  cuda::Context& ctx = cuda::Context::current();
  ctx.reset_graphs();
  std::vector<std::unique_ptr<CudaCase<GqaRopeArgs>>> cases;  // all alive: every call's buffers are new
  for (int i = 0; i < 300; ++i) {
    cases.push_back(std::make_unique<CudaCase<GqaRopeArgs>>(in, axes));
    cases.back()->run();
    expect_same_bits(cases.back()->result(), want.result(), "fresh buffers, call " + std::to_string(i));
  }
  cuda::Context::GraphStats st = ctx.graph_stats();
  EXPECT_EQ(st.graphs, 0u);
  EXPECT_LE(st.keys, 256u);
  EXPECT_GE(st.keys, 1u);
  EXPECT_FALSE(st.capture_off);

  ctx.reset_graphs();
  CudaCase<GqaRopeArgs>& again = *cases.front();
  again.run();  // first sight
  again.run();  // captured
  again.run();  // replayed
  expect_same_bits(again.result(), want.result(), "recurring key, replayed");
  st = ctx.graph_stats();
  EXPECT_EQ(st.graphs, 1u);
  EXPECT_EQ(st.keys, 1u);
  {
    const ScopedEnv other("ATTNBWD_TEST_UNLISTED_SWITCH", "1");
    again.run();  // a key of its own: a first sight, run directly
    expect_same_bits(again.result(), want.result(), "under another variable");
  }
  st = ctx.graph_stats();
  EXPECT_EQ(st.keys, 2u);
  EXPECT_EQ(st.graphs, 1u);
  ctx.reset_graphs();
}

// A call that auto runs directly (no key remembered) and 1 captures and replays, with the graphs-off bits throughout.
template <class Args>
void captured_only_when_asked(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  SCOPED_TRACE(std::string(op) + " " + tools::axes_to_string(axes));
  const GraphsOffResult<Args> ref(op, axes, seed);
  cuda::Context& ctx = cuda::Context::current();
  ctx.reset_graphs();
  CudaCase<Args> got(ref.in, ref.axes);
  for (int i = 0; i < 3; ++i) {
    got.run();  // auto: directly
    expect_same_bits(got.result(), ref.want.result(), "auto, call " + std::to_string(i));
  }
  EXPECT_EQ(ctx.graph_stats().keys, 0u);
  {
    const ScopedEnv on("ATTNBWD_CUDA_GRAPHS", "1");
    for (int i = 0; i < 3; ++i) {
      got.run();  // direct, captured, replayed
      expect_same_bits(got.result(), ref.want.result(), "1, call " + std::to_string(i));
    }
  }
  EXPECT_EQ(ctx.graph_stats().graphs, 1u);
  ctx.reset_graphs();
}

// out_proj is not captured under auto (one or two launches; its T = 256 call was slower replayed), only with 1;
// varlen only up to 1536 tokens (beyond, replays measured no faster).
TEST(CudaGraphs, OutProjAndLongVarlenAreCapturedOnlyWhenAskedFor) {
  ATTNBWD_SEED_TRACE();
  captured_only_when_asked<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(808));
  tools::Axes long_varlen = small_varlen_axes();
  long_varlen["total_seq_len"] = 1537;
  long_varlen["num_sequences"] = 2;
  captured_only_when_asked<VisionVarlenArgs>("vision_varlen_rope_backward", long_varlen, fresh_seed(812));
}

// 70 keys recurring in a cycle (more than the 64 graphs the cache holds): pass 1 sees each once, pass 2 captures 64
// and then has to drop them all unreplayed, so the context stops capturing; every call stays right.
TEST(CudaGraphs, CyclesLongerThanTheCacheStopCapturing) {
  ATTNBWD_SEED_TRACE();
  const GraphsOffResult<GqaRopeArgs> ref = tiny_gqa(fresh_seed(807));
  const tools::Axes& axes = ref.axes;
  const tools::TensorSet& in = ref.in;
  const CudaCase<GqaRopeArgs>& want = ref.want;
  cuda::Context& ctx = cuda::Context::current();
  ctx.reset_graphs();
  std::vector<std::unique_ptr<CudaCase<GqaRopeArgs>>> cases;
  for (int i = 0; i < 70; ++i) cases.push_back(std::make_unique<CudaCase<GqaRopeArgs>>(in, axes));
  for (int pass = 0; pass < 3; ++pass)
    for (std::size_t i = 0; i < cases.size(); ++i) {
      cases[i]->run();
      expect_same_bits(cases[i]->result(), want.result(),
                       "pass " + std::to_string(pass) + ", key " + std::to_string(i));
    }
  const cuda::Context::GraphStats st = ctx.graph_stats();
  EXPECT_TRUE(st.capture_off);
  EXPECT_GE(st.wasted, 64u);
  EXPECT_EQ(st.graphs, 0u);
  ctx.reset_graphs();  // later tests start from a cache that captures
}

}  // namespace
}  // namespace attnbwd::test

#endif
