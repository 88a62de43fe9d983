// CUDA graphs in the fast path (ATTNBWD_CUDA_GRAPHS=1, Context::enqueue): the first call of a key
// runs directly, the second is captured and launched, later ones replay; every one must give the
// bits of a call without graphs, with the outputs poisoned before each call (a replay that skipped
// a kernel would leave NaN). A larger problem in between grows the scratch, which must invalidate the
// captured graphs (they hold its old address): the small problem again must still be right.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "tests/common/cuda_case.hpp"
#include "tests/common/scoped_env.hpp"

namespace attnbwd::test {
namespace {

class Graphs {
 public:
  Graphs() { setenv("ATTNBWD_CUDA_GRAPHS", "1", 1); }
  ~Graphs() { unsetenv("ATTNBWD_CUDA_GRAPHS"); }
  Graphs(const Graphs&) = delete;
  Graphs& operator=(const Graphs&) = delete;
};

template <class Args>
void replays_match(const char* op, const tools::Axes& small, const tools::Axes& large, std::uint64_t seed) {
  SCOPED_TRACE(std::string(op) + " " + tools::axes_to_string(small));
  const tools::TensorSet in = tools::generate_inputs(op, small, seed, tools::default_scalars(op));
  CudaCase<Args> want(in, small);
  want.run();  // graphs off

  Graphs on;
  CudaCase<Args> got(in, small);
  for (const char* what : {"first call (direct)", "second call (captured)", "third call (replayed)", "fourth call"}) {
    got.run();
    expect_same_bits(got.result(), want.result(), what);
  }
  // A larger problem grows the scratch; the small one's graph must not be replayed on the old one.
  const tools::TensorSet big_in = tools::generate_inputs(op, large, seed + 1, tools::default_scalars(op));
  CudaCase<Args> big(big_in, large);
  big.run();
  big.run();
  for (const char* what : {"after growth, first", "after growth, second", "after growth, third"}) {
    got.run();
    expect_same_bits(got.result(), want.result(), what);
  }
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

}  // namespace
}  // namespace attnbwd::test

#endif
