// Every malformed argument is rejected with an attnbwd::Error naming it, before any output is written.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/attnbwd.hpp"
#include "tests/common/arg_fixtures.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd::test {
namespace {

using Host = Kokkos::DefaultHostExecutionSpace;

template <class Args>
bool outputs_untouched(Args& a) {
  bool ok = true;
  detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
    if (!output) return;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data);
    const std::size_t n = static_cast<std::size_t>(t.size()) * sizeof(*t.data);
    for (std::size_t i = 0; i < n; ++i) ok = ok && p[i] == Buffers::kPoison;
  });
  return ok;
}

// Runs the op on `a` and expects an Error naming `name`, with every output of `original` (the valid
// arguments `a` was derived from, whose extents describe the real buffers) left as it was.
template <class Args>
void expect_rejected(const Args& a, Args original, const std::string& name, const std::string& why) {
  SCOPED_TRACE(why);
  try {
    detail::run(Host(), a, Options{});
    ADD_FAILURE() << "accepted: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), name) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_TRUE(outputs_untouched(original)) << "an output was written before the error";
}

// Tensors whose extents define the shape: changing them moves the blame to another tensor.
template <class Fixture>
std::vector<std::string> shape_sources();
template <> std::vector<std::string> shape_sources<OutProjFixture>() { return {"grad_attn_output"}; }
template <> std::vector<std::string> shape_sources<GqaRopeFixture>() {
  return {"query_states", "grad_output", "k_weight"};
}
template <> std::vector<std::string> shape_sources<VisionMhaFixture>() { return {"q", "grad_output"}; }
template <> std::vector<std::string> shape_sources<VisionVarlenFixture>() {
  return {"grad_output", "cos", "cu_seqlens"};
}

template <class Fixture>
class Validation : public ::testing::Test {};
using Fixtures = ::testing::Types<OutProjFixture, GqaRopeFixture, VisionMhaFixture, VisionVarlenFixture>;
TYPED_TEST_SUITE(Validation, Fixtures);

TYPED_TEST(Validation, ValidArgumentsRunAndWriteEveryOutput) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(1));
  detail::run(Host(), f.a, Options{});
  detail::for_each_tensor(f.a, [&](const char* name, auto& t, bool output) {
    if (!output) return;
    for (std::int64_t i = 0; i < t.size(); ++i)
      ASSERT_TRUE(std::isfinite(static_cast<double>(static_cast<float>(t.data[i])))) << name << "[" << i << "]";
  });
}

TYPED_TEST(Validation, NullTensorIsNamed) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(2));
  std::vector<std::string> names;
  detail::for_each_tensor(f.a, [&](const char* name, auto&, bool) { names.push_back(name); });
  for (const auto& n : names) {
    auto a = f.a;
    detail::for_each_tensor(a, [&](const char* name, auto& t, bool) {
      if (n == name) t.data = nullptr;
    });
    expect_rejected(a, f.a, n, "null " + n);
  }
}

TYPED_TEST(Validation, NonContiguousTensorIsNamed) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(3));
  std::vector<std::string> names;
  detail::for_each_tensor(f.a, [&](const char* name, auto&, bool) { names.push_back(name); });
  for (const auto& n : names) {
    auto a = f.a;
    detail::for_each_tensor(a, [&](const char* name, auto& t, bool) {
      if (n == name) t.contiguous = false;
    });
    expect_rejected(a, f.a, n, "strided " + n);
  }
}

TYPED_TEST(Validation, WrongRankIsNamed) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(4));
  std::vector<std::string> names;
  detail::for_each_tensor(f.a, [&](const char* name, auto&, bool) { names.push_back(name); });
  for (const auto& n : names) {
    auto a = f.a;
    detail::for_each_tensor(a, [&](const char* name, auto& t, bool) {
      if (n == name && t.rank < 4) t.extent[t.rank++] = 1;  // same elements, one more axis
      else if (n == name) --t.rank;
    });
    expect_rejected(a, f.a, n, "rank of " + n);
  }
}

TYPED_TEST(Validation, WrongExtentIsNamed) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(5));
  const auto sources = shape_sources<TypeParam>();
  std::vector<std::string> names;
  detail::for_each_tensor(f.a, [&](const char* name, auto&, bool) { names.push_back(name); });
  for (const auto& n : names) {
    if (std::find(sources.begin(), sources.end(), n) != sources.end()) continue;
    for (int axis = 0; axis < 4; ++axis) {
      auto a = f.a;
      bool changed = false;
      detail::for_each_tensor(a, [&](const char* name, auto& t, bool) {
        if (n == name && axis < t.rank) {
          t.extent[axis] += 1;
          changed = true;
        }
      });
      if (changed) expect_rejected(a, f.a, n, "extent " + std::to_string(axis) + " of " + n);
    }
  }
}

TYPED_TEST(Validation, OutputAliasingAnInputOrOutputIsNamed) {
  ATTNBWD_SEED_TRACE();
  TypeParam f(fresh_seed(6));
  std::vector<std::string> outputs;
  std::vector<const void*> others;
  detail::for_each_tensor(f.a, [&](const char* name, auto& t, bool output) {
    if (output) outputs.push_back(name);
    others.push_back(t.data);
  });
  for (const auto& o : outputs)
    for (const void* target : others) {
      auto a = f.a;
      bool self = false;
      detail::for_each_tensor(a, [&](const char* name, auto& t, bool) {
        if (o != name) return;
        self = t.data == target;
        // Point the output at the start of the other tensor.
        t.data = reinterpret_cast<decltype(t.data)>(const_cast<void*>(target));
      });
      if (self) continue;
      // The overlap is reported against the earlier-listed of the two outputs, or the output itself.
      try {
        detail::run(Host(), a, Options{});
        ADD_FAILURE() << o << " aliasing accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("overlaps"), std::string::npos) << e.what();
      }
    }
}

TEST(Validation, NonFiniteScalarsAreNamed) {
  ATTNBWD_SEED_TRACE();
  const double bad[] = {std::nan(""), std::numeric_limits<double>::infinity(), 1e300};
  for (double v : bad) {
    {
      GqaRopeFixture f(fresh_seed(7));
      f.a.scaling = v;
      expect_rejected(f.a, f.a, "scaling", "gqa scaling");
    }
    {
      VisionMhaFixture f(fresh_seed(8));
      f.a.scale = v;
      expect_rejected(f.a, f.a, "scale", "mha scale");
    }
    {
      VisionMhaFixture f(fresh_seed(9));
      f.a.norm_eps = v;
      expect_rejected(f.a, f.a, "norm_eps", "mha norm_eps");
    }
    {
      VisionVarlenFixture f(fresh_seed(10));
      f.a.scaling = v;
      expect_rejected(f.a, f.a, "scaling", "varlen scaling");
    }
    {
      VisionVarlenFixture f(fresh_seed(11));
      f.a.attention_dropout = v;
      expect_rejected(f.a, f.a, "attention_dropout", "varlen dropout");
    }
  }
  VisionMhaFixture f(fresh_seed(12));
  f.a.norm_eps = -1e-5;
  expect_rejected(f.a, f.a, "norm_eps", "negative eps");
}

TEST(Validation, BadCuSeqlensAreNamed) {
  ATTNBWD_SEED_TRACE();
  const std::vector<std::vector<std::int32_t>> bad = {{1, 2, 5}, {0, 3, 2}, {0, 2, 4}, {0, 2, 6}, {0, -1, 5}};
  for (const auto& cu : bad) {
    VisionVarlenFixture f(fresh_seed(13));
    std::copy(cu.begin(), cu.end(), const_cast<std::int32_t*>(f.a.cu_seqlens.data));
    expect_rejected(f.a, f.a, "cu_seqlens", "cu_seqlens " + std::to_string(cu[0]) + "," +
                                           std::to_string(cu[1]) + "," + std::to_string(cu[2]));
  }
  // Zero-length sequences are valid.
  VisionVarlenFixture ok(fresh_seed(14));
  const std::int32_t cu[] = {0, 0, 5};
  std::copy(cu, cu + 3, const_cast<std::int32_t*>(ok.a.cu_seqlens.data));
  EXPECT_NO_THROW(detail::run(Host(), ok.a, Options{}));
}

TEST(Validation, ShapeMismatchBetweenSourcesIsRejected) {
  ATTNBWD_SEED_TRACE();
  {
    GqaRopeFixture f(fresh_seed(15));
    f.a.k_weight.extent[0] = 3;  // not a multiple of head_dim
    expect_rejected(f.a, f.a, "k_weight", "kv rows");
  }
  {
    GqaRopeFixture f(fresh_seed(16));
    f.a.k_weight.extent[0] = 12;  // 3 kv heads do not divide 4 query heads
    expect_rejected(f.a, f.a, "k_weight", "group size");
  }
  {
    VisionMhaFixture f(fresh_seed(17));
    f.a.grad_output.extent[2] = 6;  // embed_dim != heads * head_dim
    expect_rejected(f.a, f.a, "grad_output", "embed_dim");
  }
  {
    VisionVarlenFixture f(fresh_seed(18));
    f.a.cos.extent[1] = 3;  // odd head_dim
    expect_rejected(f.a, f.a, "cos", "odd head_dim");
  }
}

TEST(Validation, CudaBackendOnHostSpaceIsNamed) {
  ATTNBWD_SEED_TRACE();
  OutProjFixture f(fresh_seed(19));
  Options o;
  o.backend = Backend::Cuda;
  try {
    detail::run(Host(), f.a, o);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.backend");
  }
  EXPECT_TRUE(outputs_untouched(f.a));
}

}  // namespace
}  // namespace attnbwd::test
