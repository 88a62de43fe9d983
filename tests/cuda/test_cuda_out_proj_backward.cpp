// The CUDA fast path for out_proj_backward against the serial oracle: tiny and odd shapes (head_dim not
// a multiple of 8, one token, unaligned rows) and real benchmark workloads; on sm_90 the hand-tuned
// kernel forced on every shape it takes (each store path, split-K with reruns, both split-K
// reductions, head_dim 128) and against the cuBLASLt path on all 16 workloads. Built in every CUDA configuration; runs where a GPU
// is present.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "common/rng.hpp"
#include "serial/serial.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/device_args.hpp"
#include "tests/common/scoped_env.hpp"
#include "tests/common/seed.hpp"
#include "tools/workloads.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include <cuda_runtime_api.h>

#include "cuda/linear_backward_sm90.hpp"  // the planner and launch, for the cooperative plan's own test
#include "tests/common/cuda_case.hpp"       // is_sm90

namespace attnbwd::test {
namespace {

struct Case {
  std::vector<bf16> dy, x, w, dx, dw, dx_ref, dw_ref;
  OutProjArgs args, ref;
};

// Random inputs with the benchmark's distributions, outputs poisoned.
Case make_case(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D, std::uint64_t seed) {
  Case c;
  Rng rng(seed);
  const std::int64_t T = B * S, Hd = H * D;
  auto fill = [&](std::vector<bf16>& v, std::int64_t n, double scale) {
    v.resize(static_cast<std::size_t>(n));
    for (auto& e : v) e = bf16(static_cast<float>(rng.normal() * scale));
  };
  fill(c.dy, T * Hd, 1.0);
  fill(c.x, T * Hd, 1.0);
  fill(c.w, Hd * Hd, 1.0 / std::sqrt(static_cast<double>(Hd)));
  for (auto* v : {&c.dx, &c.dx_ref}) v->assign(static_cast<std::size_t>(T * Hd), bf16::from_bits(0x7fc0));
  for (auto* v : {&c.dw, &c.dw_ref}) v->assign(static_cast<std::size_t>(Hd * Hd), bf16::from_bits(0x7fc0));
  auto set = [&](OutProjArgs& a, std::vector<bf16>& dx, std::vector<bf16>& dw) {
    a.grad_output = make_tensor<const bf16>(c.dy.data(), B, S, Hd);
    a.reshaped = make_tensor<const bf16>(c.x.data(), B, S, Hd);
    a.weight = make_tensor<const bf16>(c.w.data(), Hd, Hd);
    a.grad_attn_output = make_tensor<bf16>(dx.data(), B, H, S, D);
    a.grad_weight = make_tensor<bf16>(dw.data(), Hd, Hd);
  };
  set(c.args, c.dx, c.dw);
  set(c.ref, c.dx_ref, c.dw_ref);
  return c;
}

// Runs the fast path on device copies of `host` (outputs come back into `host`) and returns the
// backend that ran.
Backend run_cuda(OutProjArgs& host) {
  DeviceArgs<Kokkos::Cuda, OutProjArgs> d(host);
  const Backend b = detail::run(Kokkos::Cuda(), d.args, Options{});
  Kokkos::Cuda().fence();
  d.outputs_to(host);
  return b;
}

// Sets ATTNBWD_CUDA_OUT_PROJ (the path override of backends/cuda/out_proj_backward.cu) for a scope.
class ForcePath {
 public:
  explicit ForcePath(const char* path) { setenv("ATTNBWD_CUDA_OUT_PROJ", path, 1); }
  ~ForcePath() { unsetenv("ATTNBWD_CUDA_OUT_PROJ"); }
  ForcePath(const ForcePath&) = delete;
  ForcePath& operator=(const ForcePath&) = delete;
};

void poison(Case& c) {
  for (auto* v : {&c.dx, &c.dw}) std::fill(v->begin(), v->end(), bf16::from_bits(0x7fc0));
}

void expect_matches_oracle(Case& c, double atol, const std::string& what) {
  SCOPED_TRACE(what);
  serial::out_proj_backward(validate(c.ref), c.ref);
  ASSERT_EQ(run_cuda(c.args), Backend::Cuda);
  // bf16 results of fp32-accumulated GEMMs differ from the double oracle by at most an ulp or two.
  Tolerance tol{atol, 0.05, 0.99, 5e-3};
  EXPECT_TRUE(close("grad_attn_output", c.dx.data(), c.dx_ref.data(), c.args.grad_attn_output.size(), tol));
  EXPECT_TRUE(close("grad_weight", c.dw.data(), c.dw_ref.data(), c.args.grad_weight.size(), tol));
}

// expect_matches_oracle, then again on the same buffers, poisoned: split-K arrival counters must have
// been left at zero and nothing may depend on the previous call's outputs.
void expect_matches_oracle_twice(Case& c, const std::string& what) {
  expect_matches_oracle(c, 1e-5, what);
  poison(c);
  ASSERT_EQ(run_cuda(c.args), Backend::Cuda);
  Tolerance tol{1e-5, 0.05, 0.99, 5e-3};
  EXPECT_TRUE(close("grad_attn_output (rerun) " + what, c.dx.data(), c.dx_ref.data(), c.args.grad_attn_output.size(),
                    tol));
  EXPECT_TRUE(close("grad_weight (rerun) " + what, c.dw.data(), c.dw_ref.data(), c.args.grad_weight.size(), tol));
}

TEST(CudaOutProj, TinyAndOddShapesMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  struct Shape {
    std::int64_t B, S, H, D;
  };
  // One token; D not a multiple of 8 (scalar head-split, unaligned rows); tails of 64/128.
  const Shape shapes[] = {{1, 1, 2, 8}, {2, 3, 3, 6}, {1, 7, 32, 64}, {3, 65, 4, 64}, {2, 131, 8, 64},
                          {1, 200, 2, 128}};
  int tag = 0;
  for (const auto& s : shapes) {
    Case c = make_case(s.B, s.S, s.H, s.D, fresh_seed(100 + tag++));
    expect_matches_oracle(c, 1e-5, "B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) +
                                       " H=" + std::to_string(s.H) + " D=" + std::to_string(s.D));
  }
}

TEST(CudaOutProj, RealWorkloadsMatchTheOracle) {
  ATTNBWD_SEED_TRACE();
  // The two smallest benchmark workloads (the oracle takes seconds on them); all 16 are checked
  // against float64 PyTorch by tests/torch/check_workloads.py on the GPU machine.
  for (const auto& w : tools::load_workloads("out_proj_backward")) {
    const std::int64_t T = w.axes.at("batch_size") * w.axes.at("seq_len");
    if (T > 512) continue;
    Case c = make_case(w.axes.at("batch_size"), w.axes.at("seq_len"), 32, 64, fresh_seed(200 + w.index));
    expect_matches_oracle(c, w.atol, "workload #" + std::to_string(w.index));
  }
}

TEST(CudaOutProj, Sm90KernelMatchesTheOracleOnEveryPath) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  ATTNBWD_SEED_TRACE();
  struct Shape {
    std::int64_t B, S, H, D;
    const char* path;
  };
  // Store paths: TMA boxes (S and D multiples of 64), 16-byte stores (S = 131, 65, 200), bf16 pairs
  // (D = 2, 6); split-K over dX for small T (T = 7, 262, 256: 4 splits; T = 512: 2), each summed by
  // the tile's cluster (ATTNBWD_CUDA_OUT_PROJ_SPLITK=cluster, the default), by the last CTA to
  // arrive (=last) and by the tile's CTAs in a cooperative launch (=coop); then the kernel's 128-column dX tiles
  // (ATTNBWD_CUDA_OUT_PROJ_DX_TILE=128: 2 splits where the plan splits, by clusters and by a cooperative launch);
  // M, N and K tails; each shape twice on the same buffers.
  const Shape shapes[] = {{1, 1, 2, 8, "pairs"},          {1, 9, 4, 2, "pairs"},
                          {2, 33, 4, 6, "pairs"},         {1, 7, 32, 64, "16-byte, split-K"},
                          {3, 65, 4, 64, "16-byte"},      {2, 131, 8, 64, "16-byte, split-K"},
                          {1, 200, 2, 128, "16-byte"},    {2, 128, 4, 128, "TMA, D=128"},
                          {4, 64, 4, 64, "TMA, T=256"},   {1, 256, 32, 64, "TMA, split-K"},
                          {2, 256, 32, 64, "TMA, split-K"}};
  ForcePath force("sm90");
  int tag = 0;
  const std::pair<const char*, const char*> variants[] = {
      {"cluster", "256"}, {"last", "256"}, {"coop", "256"}, {"cluster", "128"}, {"coop", "128"}};
  for (const auto& [reduce, tile] : variants) {
    const ScopedEnv split("ATTNBWD_CUDA_OUT_PROJ_SPLITK", reduce);
    const ScopedEnv dx_tile("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", tile);
    for (const auto& s : shapes) {
      Case c = make_case(s.B, s.S, s.H, s.D, fresh_seed(300 + tag++));
      expect_matches_oracle_twice(c, std::string(s.path) + " (" + reduce + ", dX tile " + tile + "): B=" +
                                         std::to_string(s.B) + " S=" + std::to_string(s.S) +
                                         " H=" + std::to_string(s.H) + " D=" + std::to_string(s.D));
    }
  }
}

TEST(CudaOutProj, CooperativeReductionGivesTheClusterBits) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  ATTNBWD_SEED_TRACE();
  // The same plan (4 dX splits of 256-column tiles, or 2 of 128-column tiles, forced) reduced by clusters and by a
  // cooperative launch: the same sums in the same order, so the same bits; only the grid differs (clusters of 4 fit
  // 120 CTAs on an H200, the cooperative launch one per SM, so more dW CTAs).
  ForcePath force("sm90");
  const std::array<std::int64_t, 4> shapes[] = {{1, 256, 32, 64}, {2, 131, 8, 64}, {1, 7, 32, 64}};
  int tag = 0;
  for (const char* tile : {"256", "128"})
  for (const auto& [B, S, H, D] : shapes) {
    const ScopedEnv dx_tile("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", tile);
    const ScopedEnv plan("ATTNBWD_SM90_LINEAR_PLAN", std::string(tile) == "256" ? "4,1,64" : "2,1,64");
    const std::string what = std::string("dX tile ") + tile + " B=" + std::to_string(B) + " S=" + std::to_string(S) +
                             " H=" + std::to_string(H) + " D=" + std::to_string(D);
    SCOPED_TRACE(what);
    Case c = make_case(B, S, H, D, fresh_seed(320 + tag++));
    {
      const ScopedEnv split("ATTNBWD_CUDA_OUT_PROJ_SPLITK", "cluster");
      ASSERT_EQ(run_cuda(c.args), Backend::Cuda);
    }
    const std::vector<bf16> dx = c.dx, dw = c.dw;
    poison(c);
    {
      const ScopedEnv split("ATTNBWD_CUDA_OUT_PROJ_SPLITK", "coop");
      ASSERT_EQ(run_cuda(c.args), Backend::Cuda);
    }
    std::size_t differ_dx = 0, differ_dw = 0;
    for (std::size_t i = 0; i < dx.size(); ++i) differ_dx += dx[i].bits != c.dx[i].bits;
    for (std::size_t i = 0; i < dw.size(); ++i) differ_dw += dw[i].bits != c.dw[i].bits;
    EXPECT_EQ(differ_dx, 0u) << "grad_attn_output elements that differ";
    EXPECT_EQ(differ_dw, 0u) << "grad_weight elements that differ";
    // and the cooperative result against the oracle (a poisoned or unwritten element fails here as well)
    expect_matches_oracle(c, 1e-5, "coop " + what);
  }
}

// The current device's SM count (0 where the runtime cannot say).
int device_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

// The planner's view of out_proj at T tokens (one sequence) and hidden size `hidden` in heads of 64 (no pointers:
// for plans only, or filled in before a launch).
cuda::sm90::LinearBackward problem(std::int64_t T, std::int64_t hidden) {
  cuda::sm90::LinearBackward p;
  p.out_features = p.in_features = hidden;
  p.batch = 1, p.seq_len = T, p.heads = hidden / 64, p.head_dim = 64;
  return p;
}

// A CUDA call of case c that must fail with an attnbwd::Error naming `var`.
void expect_error_naming(Case& c, const char* var) {
  try {
    run_cuda(c.args);
    ADD_FAILURE() << "expected attnbwd::Error naming " << var;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), var);
  }
}

// The planner's cooperative plans keep the co-residency the reduction relies on (a tile's splits consecutive CTAs in
// one round: dX CTAs a multiple of the splits; the grid at most one CTA per SM; no clusters), on this device and as
// if it had fewer SMs; auto takes the cooperative plan at T = 256 on an H200-sized GPU and the cluster plan at
// T = 512; and the launch really is cooperative, with the plan's grid and no cluster dimension (the kernel node of a
// captured launch, then the graph run once).
TEST(CudaOutProj, CooperativePlansAndTheirLaunch) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  namespace sm90 = cuda::sm90;
  if (!sm90::cooperative_launch_supported()) GTEST_SKIP() << "no cooperative launches on this device";
  const int sms = device_sms();
  if (sms == 0) FAIL() << "no SM count for the current device";
  int coop_plans = 0;
  for (const int n : {sms, 114, 78})
    for (const std::int64_t hidden : {256, 2048})
      for (const std::int64_t T : {7, 131, 256, 262, 512, 1024, 2048}) {
        const sm90::LinearBackward p = problem(T, hidden);
        const sm90::LinearBackwardPlan c = sm90::linear_backward_plan(p, n, sm90::SplitReduce::CoResident);
        const std::string what = "sms=" + std::to_string(n) + " hidden=" + std::to_string(hidden) +
                                 " T=" + std::to_string(T);
        EXPECT_EQ(c.coop, c.splits_dx > 1) << what;
        EXPECT_EQ(c.cluster, 1) << what;
        EXPECT_LE(c.grid, n) << what;
        EXPECT_GT(c.grid, c.ctas_dx) << what;
        EXPECT_EQ(c.ctas_dx % c.splits_dx, 0) << what;
        const sm90::LinearBackwardPlan k = sm90::linear_backward_plan(p, n, sm90::SplitReduce::Cluster);
        // the cooperative candidates include the cluster ones (its CTA cap is at least theirs): never a worse model
        EXPECT_LE(c.model_time, k.model_time * (1 + 1e-9)) << what;
        coop_plans += c.coop;
      }
  EXPECT_GT(coop_plans, 0);
  if (sms == 132) {  // an H200 (or H100 SXM): the choices measured (perf/NOTES.md, twenty-ninth session)
    const sm90::LinearBackwardPlan a256 = sm90::linear_backward_auto_plan(problem(256, 2048), sms, 256);
    EXPECT_TRUE(a256.coop);
    EXPECT_EQ(a256.grid, 132);
    EXPECT_EQ(a256.splits_dx, 4);
    const sm90::LinearBackwardPlan a512 = sm90::linear_backward_auto_plan(problem(512, 2048), sms, 256);
    EXPECT_FALSE(a512.coop);
    EXPECT_GT(a512.cluster, 1);
  }

  // The launch at T = 256, hidden 2048, captured.
  sm90::LinearBackward p = problem(256, 2048);
  const sm90::LinearBackwardPlan plan = sm90::linear_backward_plan(p, sms, sm90::SplitReduce::CoResident);
  ASSERT_TRUE(plan.coop);
  const std::size_t act = 256 * 2048 * 2, wgt = 2048 * 2048 * 2;
  void *dy = nullptr, *x = nullptr, *w = nullptr, *dx = nullptr, *dw = nullptr, *ws = nullptr, *cnt = nullptr;
  for (auto [ptr, bytes] : {std::pair{&dy, act}, {&x, act}, {&w, wgt}, {&dx, act}, {&dw, wgt},
                            {&ws, plan.workspace_bytes}, {&cnt, plan.counters * sizeof(unsigned)}}) {
    ASSERT_EQ(cudaMalloc(ptr, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(*ptr, 0, bytes), cudaSuccess);
  }
  p.grad_output = dy, p.input = x, p.weight = w, p.grad_input = dx, p.grad_weight = dw;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  sm90::linear_backward_launch(p, plan, ws, static_cast<unsigned*>(cnt), s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  std::size_t n = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &n), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  ASSERT_EQ(cudaGraphGetNodes(graph, nodes.data(), &n), cudaSuccess);
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    if (type != cudaGraphNodeTypeKernel) continue;
    ++kernels;
    cudaKernelNodeParams kp{};
    ASSERT_EQ(cudaGraphKernelNodeGetParams(node, &kp), cudaSuccess);
    EXPECT_EQ(static_cast<int>(kp.gridDim.x), plan.grid);
    cudaLaunchAttributeValue v{};
    ASSERT_EQ(cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeCooperative, &v), cudaSuccess);
    EXPECT_EQ(v.cooperative, 1);
    cudaLaunchAttributeValue cl{};
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeClusterDimension, &cl) == cudaSuccess)
      EXPECT_LE(cl.clusterDim.x, 1u);
  }
  EXPECT_EQ(kernels, 1);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<unsigned> counters(plan.counters, 1);
  ASSERT_EQ(cudaMemcpy(counters.data(), cnt, plan.counters * sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0u), static_cast<std::ptrdiff_t>(plan.counters))
      << "arrival counters left non-zero";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  for (void* ptr : {dy, x, w, dx, dw, ws, cnt}) cudaFree(ptr);
}

// Plans with 128-column dX tiles: at most 2 splits, each split group co-resident (clusters of the split count, or a
// cooperative launch), the workspace one 128 x 128 fp32 partial per split unit; auto takes them on a 132-SM GPU for
// out_proj at T = 256 (2 splits in clusters of 2) and 512 (no split), and 256-column tiles from T = 1024 on, and never
// for a grouped problem; a 128-column plan for a grouped problem or with the last-arrival reduction is refused.
TEST(CudaOutProj, NarrowDxTilePlans) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  namespace sm90 = cuda::sm90;
  const int sms = device_sms();
  if (sms == 0) FAIL() << "no SM count for the current device";
  for (const int n : {sms, 114, 78})
    for (const std::int64_t hidden : {256, 2048, 4096})
      for (const std::int64_t T : {7, 131, 256, 262, 512, 1024, 2048})
        for (const auto reduce : {sm90::SplitReduce::Cluster, sm90::SplitReduce::CoResident}) {
          if (reduce == sm90::SplitReduce::CoResident && !sm90::cooperative_launch_supported()) continue;
          const sm90::LinearBackward p = problem(T, hidden);
          const sm90::LinearBackwardPlan c = sm90::linear_backward_plan(p, n, reduce, 128);
          const std::string what = "sms=" + std::to_string(n) + " hidden=" + std::to_string(hidden) +
                                   " T=" + std::to_string(T) + (c.coop ? " coop" : " cluster");
          EXPECT_EQ(c.dx_tile_n, 128) << what;
          EXPECT_LE(c.splits_dx, 2) << what;
          EXPECT_EQ(c.ctas_dx % c.splits_dx, 0) << what;
          EXPECT_LE(c.grid, n) << what;
          if (c.splits_dx > 1) EXPECT_TRUE(c.coop || c.cluster == c.splits_dx) << what;
          const std::size_t tiles_dx = static_cast<std::size_t>((T + 127) / 128) * ((hidden + 127) / 128);
          const std::size_t tiles_dw = static_cast<std::size_t>((hidden + 127) / 128) * ((hidden + 255) / 256);
          const std::size_t dx_bytes = c.splits_dx > 1 ? tiles_dx * c.splits_dx * 128 * 128 * 4 : 0;
          const std::size_t dw_bytes = c.splits_dw > 1 ? tiles_dw * c.splits_dw * 128 * 256 * 4 : 0;
          EXPECT_EQ(c.workspace_bytes, dx_bytes + dw_bytes) << what;
          EXPECT_EQ(c.counters, tiles_dx + tiles_dw) << what;
        }
  if (sms == 132) {
    const sm90::LinearBackwardPlan a256 = sm90::linear_backward_auto_plan(problem(256, 2048), sms);
    EXPECT_EQ(a256.dx_tile_n, 128);
    EXPECT_EQ(a256.splits_dx, 2);
    EXPECT_EQ(a256.cluster, 2);
    const sm90::LinearBackwardPlan a512 = sm90::linear_backward_auto_plan(problem(512, 2048), sms);
    EXPECT_EQ(a512.dx_tile_n, 128);
    EXPECT_EQ(a512.splits_dx, 1);
    for (const std::int64_t T : {1024, 2048, 4096, 8192})
      EXPECT_EQ(sm90::linear_backward_auto_plan(problem(T, 2048), sms).dx_tile_n, 256) << "T=" << T;
  }
  sm90::LinearBackward grouped = problem(256, 2048);
  grouped.segments = 2;
  grouped.seg_rows[0] = grouped.seg_rows[1] = 1024;
  EXPECT_EQ(sm90::linear_backward_auto_plan(grouped, sms).dx_tile_n, 256);
  EXPECT_ANY_THROW(sm90::linear_backward_plan(grouped, sms, sm90::SplitReduce::Cluster, 128));
  EXPECT_ANY_THROW(sm90::linear_backward_plan(problem(256, 2048), sms, sm90::SplitReduce::LastArrival, 128));
  // the switch: 128 with the last-arrival reduction, and an unknown width, are Errors naming their variable
  Case c = make_case(1, 256, 32, 64, fresh_seed(330));
  {
    ForcePath force("sm90");
    const ScopedEnv split("ATTNBWD_CUDA_OUT_PROJ_SPLITK", "last");
    const ScopedEnv tile("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", "128");
    expect_error_naming(c, "ATTNBWD_CUDA_OUT_PROJ_DX_TILE");
  }
  const ScopedEnv tile("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", "64");
  expect_error_naming(c, "ATTNBWD_CUDA_OUT_PROJ_DX_TILE");
}

// Each shape {B, S, H, D} through the forced path ATTNBWD_CUDA_OUT_PROJ=`path`, twice on the same buffers.
void check_path(const char* path, std::initializer_list<std::array<std::int64_t, 4>> shapes, int seed0) {
  ForcePath force(path);
  int tag = 0;
  for (const auto& [B, S, H, D] : shapes) {
    Case c = make_case(B, S, H, D, fresh_seed(seed0 + tag++));
    expect_matches_oracle_twice(c, std::string(path) + ": B=" + std::to_string(B) + " S=" + std::to_string(S) +
                                       " H=" + std::to_string(H) + " D=" + std::to_string(D));
  }
}

TEST(CudaOutProj, HybridPathMatchesTheOracle) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  ATTNBWD_SEED_TRACE();
  // dX by the kernel alone (split-K summed by clusters where its plan splits: hidden 2048, 256), dW by
  // cuBLASLt on the side stream; TMA, 16-byte and bf16-pair stores; reruns on the same buffers.
  check_path("hybrid", {{1, 256, 32, 64}, {2, 256, 32, 64}, {1, 7, 32, 64}, {3, 65, 4, 64}, {2, 33, 4, 6}}, 600);
}

TEST(CudaOutProj, ThinPathMatchesTheOracle) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  ATTNBWD_SEED_TRACE();
  // Both GEMMs by the thin-T kernel: T = 1 .. 256 (one to four 64-row blocks), hidden 8 .. 3072 (one 128-column
  // slice with its columns past the hidden size read as zeros, up to 24 slices), so dX's partial sums go through
  // clusters of 1, 2, 4, 8 and, at hidden 2304 and 3072, 7 and 5 ranges (summed by the second launch where the
  // device cannot hold every slice's cluster at once); head-split dX with D = 2 .. 128; reruns on the same buffers.
  check_path("thin",
             {{1, 1, 2, 8}, {1, 9, 4, 2}, {2, 33, 4, 6}, {1, 7, 32, 64}, {3, 65, 4, 64}, {1, 200, 2, 128},
              {2, 128, 4, 128}, {4, 64, 4, 64}, {1, 256, 32, 64}, {2, 100, 32, 64}, {1, 131, 36, 64}, {2, 60, 48, 64}},
             700);
  // More than 256 tokens: an Error naming the switch.
  ForcePath force("thin");
  Case c = make_case(1, 257, 2, 64, fresh_seed(720));
  try {
    run_cuda(c.args);
    ADD_FAILURE() << "expected attnbwd::Error at T = 257";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "ATTNBWD_CUDA_OUT_PROJ");
  }
}

TEST(CudaOutProj, ForcingTheSm90KernelWhereItCannotRunIsAnError) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  Case c = make_case(2, 3, 3, 6, fresh_seed(400));  // hidden 18: not a multiple of 8 (TMA row stride)
  for (const char* path : {"sm90", "hybrid", "thin"}) {
    SCOPED_TRACE(std::string("ATTNBWD_CUDA_OUT_PROJ=") + path);
    ForcePath force(path);
    expect_error_naming(c, "ATTNBWD_CUDA_OUT_PROJ");
  }
  ForcePath bad("fastest");
  EXPECT_THROW(run_cuda(c.args), Error);
}

TEST(CudaOutProj, Sm90KernelAgreesWithTheCublasLtPathOnAllWorkloads) {
  if (!is_sm90()) GTEST_SKIP() << "the sm_90a kernel runs on compute capability 9.0 only";
  ATTNBWD_SEED_TRACE();
  // Two independent implementations (hand-written wgmma kernel; cuBLASLt + layout copy), each one
  // bf16 rounding of an fp32 sum: they differ by summation order only.
  for (const auto& w : tools::load_workloads("out_proj_backward")) {
    Case c = make_case(w.axes.at("batch_size"), w.axes.at("seq_len"), 32, 64, fresh_seed(500 + w.index));
    {
      ForcePath force("cublaslt");
      ASSERT_EQ(run_cuda(c.ref), Backend::Cuda);
    }
    {
      ForcePath force("sm90");
      ASSERT_EQ(run_cuda(c.args), Backend::Cuda);
    }
    Tolerance tol{w.atol, 0.05, 0.99, 5e-3};
    const std::string what = " workload #" + std::to_string(w.index);
    EXPECT_TRUE(close("grad_attn_output" + what, c.dx.data(), c.dx_ref.data(), c.args.grad_attn_output.size(), tol));
    EXPECT_TRUE(close("grad_weight" + what, c.dw.data(), c.dw_ref.data(), c.args.grad_weight.size(), tol));
  }
}

}  // namespace
}  // namespace attnbwd::test

#endif
