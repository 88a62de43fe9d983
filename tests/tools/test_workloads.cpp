#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "attnbwd/error.hpp"
#include "tools/workloads.hpp"

using attnbwd::Error;
using namespace attnbwd::tools;

TEST(Workloads, OpNamesMapToProblemFolders) {
  ASSERT_EQ(op_names().size(), 4u);
  EXPECT_EQ(problem_dir("out_proj_backward"), "004_attention_output_projection_with_reshape_backward");
  EXPECT_EQ(problem_dir("gqa_rope_backward"), "003_grouped_query_attention_with_rope_backward");
  EXPECT_EQ(problem_dir("vision_mha_norm_backward"),
            "001_fused_vision_multihead_attention_with_norms_backward");
  EXPECT_EQ(problem_dir("vision_varlen_rope_backward"),
            "017_fused_vision_cu_seqlens_attention_with_2d_rope_backward");
  try {
    problem_dir("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "op");
    EXPECT_NE(std::string(e.what()).find("out_proj_backward"), std::string::npos);  // lists valid names
  }
}

TEST(Workloads, EveryOpHasSixteenWellFormedWorkloads) {
  for (const std::string& op : op_names()) {
    SCOPED_TRACE(op);
    const std::vector<Workload> ws = load_workloads(op);
    ASSERT_EQ(ws.size(), 16u);
    const Definition def = load_definition(op);
    std::set<std::string> uuids;
    for (const Workload& w : ws) {
      EXPECT_EQ(w.index, static_cast<int>(&w - ws.data()));
      EXPECT_EQ(w.uuid.size(), 36u);
      uuids.insert(w.uuid);
      EXPECT_GT(w.atol, 0.0);
      EXPECT_GT(w.rtol, 0.0);
      ASSERT_EQ(w.axes.size(), def.var_axes.size());
      for (const std::string& a : def.var_axes) EXPECT_EQ(w.axes.count(a), 1u) << a;
      EXPECT_NO_THROW(def.resolve_axes(w.axes));
      EXPECT_EQ(&find_workload(ws, w.uuid), &w);
      EXPECT_EQ(&find_workload(ws, std::to_string(w.index)), &w);
    }
    EXPECT_EQ(uuids.size(), 16u);
  }
}

TEST(Workloads, SpotChecksAgainstTheSpecTables) {
  const auto w004 = load_workloads("out_proj_backward");
  EXPECT_EQ(w004[0].uuid, "adc2dc19-99b5-58b4-b6aa-1b298934858a");
  EXPECT_EQ(w004[0].axes, (Axes{{"batch_size", 64}, {"seq_len", 128}}));
  EXPECT_DOUBLE_EQ(w004[0].atol, 0.0032);
  EXPECT_DOUBLE_EQ(w004[0].rtol, 0.05);
  EXPECT_TRUE(w004[0].scalars.empty());

  const auto w017 = load_workloads("vision_varlen_rope_backward");
  EXPECT_EQ(w017[3].axes, (Axes{{"num_sequences", 5}, {"total_seq_len", 773}}));
  EXPECT_DOUBLE_EQ(w017[3].rtol, 1e-5);

  const auto w003 = load_workloads("gqa_rope_backward");
  EXPECT_EQ(w003[0].scalars.at("scaling"), 0.08838834764831845);
  const auto w001 = load_workloads("vision_mha_norm_backward");
  EXPECT_EQ(w001[13].axes.at("batch_size"), 56);
  EXPECT_EQ(w001[0].scalars.at("norm_eps"), 1e-5);
}

TEST(Workloads, FindWorkloadRejectsUnknownKeys) {
  const auto ws = load_workloads("out_proj_backward");
  for (const char* key : {"16", "-1", "adc2dc19", ""}) {
    try {
      find_workload(ws, key);
      ADD_FAILURE() << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "workload");
    }
  }
}

TEST(Workloads, ParseErrorsNameTheLine) {
  const std::string good = R"({"uuid":"u","axes":{"b":1},"tolerance":{"max_atol":0.1,"max_rtol":0.2}})";
  EXPECT_EQ(parse_workloads(good + "\n\n" + good + "\n", "f").size(), 2u);
  try {
    parse_workloads(good + "\n{\"uuid\": \"u\", \"axes\": {}}\n", "f.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.jsonl: line 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tolerance"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_workloads("{\"uuid\":", "f"), Error);
  EXPECT_THROW(
      parse_workloads(R"({"uuid":"u","axes":{"b":1.5},"tolerance":{"max_atol":0,"max_rtol":0}})", "f"),
      Error);
}

TEST(Workloads, SolexecDirHonoursTheEnvironment) {
  const std::string before = solexec_dir();
  ASSERT_FALSE(before.empty());
  ::setenv("ATTNBWD_SOLEXEC", "/nonexistent/solexec", 1);
  EXPECT_EQ(solexec_dir(), "/nonexistent/solexec");
  EXPECT_THROW(load_workloads("out_proj_backward"), Error);
  // Definitions fall back to the built-in copy.
  EXPECT_EQ(load_definition("out_proj_backward").name,
            "004_attention_output_projection_with_reshape_backward");
  ::setenv("ATTNBWD_SOLEXEC", before.c_str(), 1);
  EXPECT_EQ(load_workloads("out_proj_backward").size(), 16u);
}

TEST(Definitions, BuiltInCopiesMatchTheFiles) {
  for (const std::string& op : op_names()) {
    SCOPED_TRACE(op);
    const Definition file = load_definition(op);
    const Definition builtin = builtin_definition(op);
    EXPECT_EQ(file.name, problem_dir(op));
    EXPECT_EQ(file.name, builtin.name);
    EXPECT_EQ(file.var_axes, builtin.var_axes);
    EXPECT_EQ(file.const_axes, builtin.const_axes);
    EXPECT_EQ(file.expr_axes, builtin.expr_axes);
    EXPECT_EQ(file.custom_inputs, builtin.custom_inputs);
    for (auto sections :
         {std::make_pair(&file.inputs, &builtin.inputs), std::make_pair(&file.outputs, &builtin.outputs)}) {
      ASSERT_EQ(sections.first->size(), sections.second->size());
      for (std::size_t i = 0; i < sections.first->size(); ++i) {
        const TensorDef &a = (*sections.first)[i], &b = (*sections.second)[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(a.shape, b.shape) << a.name;
        EXPECT_EQ(a.is_scalar, b.is_scalar) << a.name;
        EXPECT_EQ(a.dtype, b.dtype) << a.name;
      }
    }
  }
}

TEST(Definitions, ResolveAxes) {
  const Definition d = load_definition("gqa_rope_backward");
  const Axes a = d.resolve_axes({{"batch_size", 2}, {"seq_len", 131}});
  EXPECT_EQ(a.at("hidden_size"), 5120);
  EXPECT_EQ(a.at("q_proj_size"), 4096);
  EXPECT_EQ(a.at("kv_proj_size"), 1024);
  EXPECT_EQ(d.shape_of(d.inputs[4], a), (std::vector<std::int64_t>{4096, 5120}));  // q_weight

  // Constants may be overridden (small test shapes); expressions follow.
  const Axes small = d.resolve_axes({{"batch_size", 1}, {"seq_len", 3}, {"head_dim", 8}});
  EXPECT_EQ(small.at("q_proj_size"), 32 * 8);

  auto error_axis = [&](const Axes& given) {
    try {
      d.resolve_axes(given);
    } catch (const Error& e) {
      return e.argument();
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(error_axis({{"batch_size", 1}}), "seq_len");                                          // missing
  EXPECT_EQ(error_axis({{"batch_size", 1}, {"seq_len", 2}, {"heads", 4}}), "heads");              // unknown
  EXPECT_EQ(error_axis({{"batch_size", 1}, {"seq_len", 2}, {"q_proj_size", 4}}), "q_proj_size");  // derived
  EXPECT_EQ(error_axis({{"batch_size", 0}, {"seq_len", 2}}), "batch_size");  // not positive

  const Definition v = load_definition("vision_varlen_rope_backward");
  EXPECT_EQ(v.resolve_axes({{"total_seq_len", 773}, {"num_sequences", 5}}).at("num_seqlens"), 6);
}

TEST(Axes, FromAndToString) {
  EXPECT_EQ(axes_from_string("batch_size=1,seq_len=256"), (Axes{{"batch_size", 1}, {"seq_len", 256}}));
  EXPECT_EQ(axes_to_string({{"seq_len", 256}, {"batch_size", 1}}), "batch_size=1,seq_len=256");
  for (const char* bad :
       {"", "batch_size", "batch_size=", "=3", "a=1,a=2", "a=1x", "a=1,,b=2", "a=9999999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(axes_from_string(bad), Error);
  }
}

TEST(Axes, Expressions) {
  const Axes a{{"embed_dim", 1024}, {"n", 5}};
  EXPECT_EQ(eval_axis_expr("embed_dim * 3", a), 3072);
  EXPECT_EQ(eval_axis_expr("n + 1", a), 6);
  EXPECT_EQ(eval_axis_expr("(n - 1) * (embed_dim / 2)", a), 2048);
  EXPECT_EQ(eval_axis_expr("1", a), 1);
  EXPECT_THROW(eval_axis_expr("missing * 2", a), Error);
  EXPECT_THROW(eval_axis_expr("n +", a), Error);
  EXPECT_THROW(eval_axis_expr("n / 0", a), Error);
}
