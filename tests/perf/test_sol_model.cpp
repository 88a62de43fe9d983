// The perf suite's SOL model (perf/sol_model.*) against spec §9: its closed-form counts on every
// workload, and its T_SOL at the B200 constants against the published SOL column.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "perf/sol_model.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

using namespace attnbwd;
using namespace attnbwd::perf;

namespace {

tools::Axes resolved(const std::string& op, int index) {
  const auto ws = tools::load_workloads(op);
  return tools::load_definition(op).resolve_axes(ws.at(static_cast<std::size_t>(index)).axes);
}

double sum_l2(std::int64_t S, std::int64_t n) {
  const auto cu = tools::even_cu_seqlens(S, n);
  double s = 0;
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) s += double(cu[i + 1] - cu[i]) * (cu[i + 1] - cu[i]);
  return s;
}

// Published SOL (ms) = model at B200 + ~0.4 µs; the column has 4 decimals.
void expect_published(const std::string& op, int index, double published_ms) {
  SCOPED_TRACE(op + " #" + std::to_string(index));
  const Work w = workload_work(op, resolved(op, index));
  const double model_ms = (t_sol(w, b200_peaks()) + kPublishedOffsetSeconds) * 1e3;
  EXPECT_NEAR(model_ms / published_ms, 1.0, 0.01) << "model " << model_ms << " ms";
}

}  // namespace

// Spec §9's formula table, with its constants, on all 64 workloads.
TEST(SolModel, MatchesTheSpecFormulasOnEveryWorkload) {
  for (const std::string& op : tools::op_names()) {
    for (const auto& wl : tools::load_workloads(op)) {
      SCOPED_TRACE(op + " #" + std::to_string(wl.index));
      const tools::Axes a = resolved(op, wl.index);
      const Work w = workload_work(op, a);
      double flop = 0, bytes = 0;
      if (op == "out_proj_backward") {
        const double T = double(a.at("batch_size")) * a.at("seq_len");
        flop = 16777216.0 * T;
        bytes = 12288.0 * T + 16777216.0;
      } else if (op == "gqa_rope_backward") {
        const double B = a.at("batch_size"), S = a.at("seq_len"), T = B * S;
        flop = 209715200.0 * T + 32768.0 * B * S * S;
        bytes = 64000.0 * T + 64.0 * B * S * S + 209715200.0;
      } else if (op == "vision_mha_norm_backward") {
        const double B = a.at("batch_size");
        flop = 12407808000.0 * B;
        bytes = 40219208.0 * B + 33583104.0;
      } else {
        const double S = a.at("total_seq_len"), n = a.at("num_sequences");
        flop = 282591232.0 * S + 43008.0 * sum_l2(a.at("total_seq_len"), a.at("num_sequences"));
        bytes = 44032.0 * S + 411142144.0 + 4.0 * (n + 1);
      }
      EXPECT_DOUBLE_EQ(w.gemm_flop, flop);
      EXPECT_DOUBLE_EQ(w.min_bytes, bytes);
      // fp32 ops: the model counts their elements at 2 bytes, bf16 ones at their own 2 bytes.
      const bool fp32 = op == "vision_mha_norm_backward" || op == "vision_varlen_rope_backward";
      EXPECT_NEAR(w.bytes_2b() / w.min_bytes, fp32 ? 0.5 : 1.0, 1e-6);
    }
  }
}

TEST(SolModel, ReproducesThePublishedSolWithinOnePercent) {
  // DRAM-bound: the one workload where the traffic term sets the published SOL.
  {
    const Work w = workload_work("out_proj_backward", resolved("out_proj_backward", 8));
    EXPECT_GT(t_dram_2b(w, b200_peaks()), t_gemm(w, b200_peaks()));
  }
  expect_published("out_proj_backward", 8, 0.0030);
  expect_published("out_proj_backward", 0, 0.0763);
  expect_published("gqa_rope_backward", 9, 0.5505);
  expect_published("gqa_rope_backward", 13, 0.0312);
  expect_published("vision_mha_norm_backward", 13, 0.3840);
  // fp32 traffic (0.0096 ms) would exceed the published 0.0073 ms; at 2 bytes it does not.
  expect_published("vision_mha_norm_backward", 10, 0.0073);
  expect_published("vision_varlen_rope_backward", 10, 1.3283);
  expect_published("vision_varlen_rope_backward", 2, 0.9452);
}

// Where the spec's model and SOLAR disagree (spec §9 "reading the tables"): 003 #5 and #11 are
// unexplained, and for 017 #8 SOLAR's traffic count is below 2 bytes per min-DRAM element. The
// model is the larger (a stricter E there); this test records that it stays so.
TEST(SolModel, KnownDivergencesAreConservative) {
  const std::pair<const char*, std::pair<int, double>> cases[] = {
      {"gqa_rope_backward", {5, 0.0212}},
      {"gqa_rope_backward", {11, 0.0211}},
      {"vision_varlen_rope_backward", {8, 0.0212}}};
  for (const auto& [op, c] : cases) {
    const Work w = workload_work(op, resolved(op, c.first));
    EXPECT_GT(t_sol(w, b200_peaks()) * 1e3, c.second * 1.05) << op << " #" << c.first;
  }
}

TEST(SolModel, PeaksByDeviceName) {
  EXPECT_EQ(peaks_for_device("NVIDIA H200").peaks.model, "H200");
  EXPECT_TRUE(peaks_for_device("NVIDIA H200").known);
  EXPECT_DOUBLE_EQ(peaks_for_device("NVIDIA B200").peaks.bf16_flops, 1.811e15);
  EXPECT_DOUBLE_EQ(peaks_for_device("nvidia b200").peaks.dram_bytes_per_s, 7.667e12);
  const PeakChoice unknown = peaks_for_device("NVIDIA A100-SXM4-80GB");
  EXPECT_FALSE(unknown.known);
  EXPECT_EQ(unknown.peaks.model, "H200");
  EXPECT_NE(unknown.note.find("A100"), std::string::npos);
  const PeakChoice host = peaks_for_device("");
  EXPECT_FALSE(host.known);
  EXPECT_DOUBLE_EQ(host.peaks.bf16_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(host.peaks.dram_bytes_per_s, 4.8e12);
}
