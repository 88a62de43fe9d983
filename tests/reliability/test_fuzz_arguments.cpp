// Argument fuzzing of the validation layer, through detail::run on the default host execution space.
//
// Each case draws a random small shape for one op (sometimes one that breaks a shape rule: a zero
// extent, an odd head_dim, num_heads not a multiple of the KV heads, embed_dim != heads·head_dim,
// head_dim not dividing hidden_size), lays every tensor out in one arena (tests/reliability/cases.hpp:
// outputs prefilled with a pattern, guard bytes after every buffer, slack around them) and then
// applies at most one or two argument mutations:
//   null pointer · non-contiguous flag · wrong rank (-1..5) · wrong extent (0, negative, ±1, huge,
//   INT64_MAX/MIN) · output aliasing an input or another output (same start, starting inside,
//   ending inside, or only touching: the last is valid) · scalar NaN / ±Inf / beyond float range /
//   negative norm_eps (or a valid extreme: FLT_MAX, denormal, -0) · cu_seqlens non-monotone, not
//   starting at 0, not ending at S, negative, INT32_MIN/MAX, too short, too long (padding valid or not)
//   · backend = cuda on a host space, or not a Backend value · two of these at once.
// Whether the result is valid is decided independently of the library (the shape rules, an overlap
// test of the byte ranges, the cu_seqlens rule). A malformed case must throw attnbwd::Error whose
// argument() names an argument of the op (the mutated one, where that is determined) and leave every
// byte of the arena as it was; a valid one must run without throwing and leave inputs and guard
// bytes alone. Buffers are sized so that a wrongly accepted case never leaves the arena.
//
// Budget: ATTNBWD_FUZZ_CASES cases per op (default 4000), fresh seed each run (tests/common/seed.hpp);
// the counts go to the test's properties (cases, valid, rejected) and to stdout.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/seed.hpp"
#include "tests/reliability/cases.hpp"

namespace attnbwd::test::rel {
namespace {

using Host = Kokkos::DefaultHostExecutionSpace;

int cases_per_op() {
  if (const char* s = std::getenv("ATTNBWD_FUZZ_CASES")) return std::max(1, std::atoi(s));
  return 4000;
}

int64_t pick(Rng& r, int64_t lo, int64_t hi) {  // uniform in [lo, hi]
  return lo + static_cast<int64_t>(r.next() % static_cast<std::uint64_t>(hi - lo + 1));
}
bool chance(Rng& r, double p) { return r.uniform() < p; }
template <class T>
T pick_of(Rng& r, const std::vector<T>& v) {
  return v[static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(v.size()) - 1))];
}

// ---- random shapes: valid, or breaking one shape rule (then `broken` says which) -----------------

OutProjParams random_params(Rng& r, OutProjParams, std::string* broken) {
  OutProjParams p{pick(r, 1, 3), pick(r, 1, 9), pick(r, 1, 4), pick(r, 1, 8)};
  if (broken) {
    int64_t* dims[] = {&p.B, &p.S, &p.H, &p.D};
    *dims[pick(r, 0, 3)] = 0;
    *broken = "a zero extent";
  }
  return p;
}

GqaParams random_params(Rng& r, GqaParams, std::string* broken) {
  GqaParams p;
  p.B = pick(r, 1, 2);
  p.S = pick(r, 1, 8);
  p.Hkv = pick(r, 1, 3);
  p.Hq = p.Hkv * pick(r, 1, 3);
  p.D = 2 * pick(r, 1, 4);
  p.Hd = pick(r, 1, 12);
  p.scaling = r.normal();
  if (broken) {
    switch (pick(r, 0, 2)) {
      case 0:
        p.D = 2 * pick(r, 0, 3) + 1;
        *broken = "odd head_dim";
        break;
      case 1:
        p.Hkv = pick(r, 2, 3);
        p.Hq = p.Hkv * pick(r, 0, 2) + pick(r, 1, p.Hkv - 1);
        *broken = "num_heads not a multiple of num_key_value_heads";
        break;
      default: {
        int64_t* dims[] = {&p.B, &p.S, &p.Hq, &p.D, &p.Hd};
        *dims[pick(r, 0, 4)] = 0;
        *broken = "a zero extent";
      }
    }
  }
  return p;
}

MhaParams random_params(Rng& r, MhaParams, std::string* broken) {
  MhaParams p;
  p.B = pick(r, 1, 2);
  p.S = pick(r, 1, 8);
  p.H = pick(r, 1, 3);
  p.D = pick(r, 1, 8);
  p.E = p.H * p.D;
  p.scale = r.normal();
  p.norm_eps = chance(r, 0.2) ? 0.0 : 1e-3 * r.uniform();
  if (broken) {
    if (chance(r, 0.5)) {
      p.E = std::max<int64_t>(1, p.H * p.D + pick(r, -3, 3));
      if (p.E == p.H * p.D) ++p.E;
      *broken = "embed_dim != num_heads * head_dim";
    } else {
      int64_t* dims[] = {&p.B, &p.S, &p.H, &p.D};
      *dims[pick(r, 0, 3)] = 0;
      p.E = p.H * p.D;
      *broken = "a zero extent";
    }
  }
  return p;
}

VarlenParams random_params(Rng& r, VarlenParams, std::string* broken) {
  VarlenParams p;
  const int64_t H = pick(r, 1, 3);
  p.D = 2 * pick(r, 1, 4);
  p.C = H * p.D;
  const int64_t n = pick(r, 1, 4);
  p.cu.assign(1, 0);
  for (int64_t i = 0; i < n; ++i) p.cu.push_back(p.cu.back() + static_cast<std::int32_t>(pick(r, chance(r, 0.2) ? 0 : 1, 6)));
  if (p.cu.back() == 0) p.cu.back() = static_cast<std::int32_t>(pick(r, 1, 5));
  p.S = p.cu.back();
  p.attention_dropout = chance(r, 0.5) ? 0.0 : r.uniform();
  p.scaling = r.normal();
  if (broken) {
    switch (pick(r, 0, 2)) {
      case 0:
        p.D = 2 * pick(r, 0, 3) + 1;
        p.C = H * p.D;
        *broken = "odd head_dim";
        break;
      case 1:
        p.D = 2 * pick(r, 1, 4);
        p.C = H * p.D + pick(r, 1, p.D - 1);
        *broken = "head_dim not dividing hidden_size";
        break;
      default:
        if (chance(r, 0.5)) {
          p.C = 0;
        } else {
          p.S = 0;
          p.cu.assign(p.cu.size(), 0);
        }
        *broken = "a zero extent";
    }
  }
  return p;
}

const char* op_name(OutProjParams) { return "out_proj_backward"; }
const char* op_name(GqaParams) { return "gqa_rope_backward"; }
const char* op_name(MhaParams) { return "vision_mha_norm_backward"; }
const char* op_name(VarlenParams) { return "vision_varlen_rope_backward"; }

// Tensors whose extents define the shape (changing one of them moves the blame elsewhere).
std::set<std::string> shape_sources(OutProjArgs&) { return {"grad_attn_output"}; }
std::set<std::string> shape_sources(GqaRopeArgs&) { return {"query_states", "grad_output", "k_weight"}; }
std::set<std::string> shape_sources(VisionMhaArgs&) { return {"q", "grad_output"}; }
std::set<std::string> shape_sources(VisionVarlenArgs&) { return {"grad_output", "cos", "cu_seqlens"}; }

// Calls f(name, tensor, output) for the tensor at `index` in for_each_tensor order.
template <class Args, class F>
void with_tensor(Args& a, std::size_t index, F&& f) {
  std::size_t i = 0;
  detail::for_each_tensor(a, [&](const char* name, auto& t, bool output) {
    if (i++ == index) f(name, t, output);
  });
}

// ---- one case ------------------------------------------------------------------------------------

struct Verdict {
  bool valid = true;
  std::set<std::string> names;  // acceptable argument() values when invalid; empty: any of the op's
  bool guards_may_change = false;
  std::string what;
};

struct Counts {
  int cases = 0, valid = 0, rejected = 0, failures = 0;
};

template <class Params>
class FuzzCase {
  using Args = typename Case<Params>::Args;

 public:
  FuzzCase(std::uint64_t seed) : r_(seed), seed_(seed) {}

  void run(Counts& counts) {
    build();
    const auto snap = arena_.snapshot();
    bool threw = false;
    std::string err_arg, err_what;
    try {
      detail::run(Host(), args_, opts_);
    } catch (const Error& e) {
      threw = true;
      err_arg = e.argument();
      err_what = e.what();
    } catch (const std::exception& e) {
      fail(counts, std::string("threw a non-attnbwd exception: ") + e.what());
      return;
    }
    ++counts.cases;
    if (!v_.valid) {
      ++counts.rejected;
      if (!threw) return fail(counts, "malformed case accepted");
      if (err_arg.empty()) return fail(counts, "Error names no argument: " + err_what);
      const auto& ok = v_.names.empty() ? all_names_ : v_.names;
      if (!ok.count(err_arg) || !all_names_.count(err_arg))
        return fail(counts, "Error names \"" + err_arg + "\", expected one of " + join(ok) + ": " + err_what);
      const std::size_t at = arena_.first_change(snap);
      if (at != SIZE_MAX) return fail(counts, "rejected (" + err_what + ") but wrote " + arena_.where(at));
    } else {
      ++counts.valid;
      if (threw) return fail(counts, "valid case rejected: " + err_what);
      std::size_t at = arena_.first_change(snap, Arena::Scope::Inputs);
      if (at != SIZE_MAX) return fail(counts, "an input changed: " + arena_.where(at));
      if (!v_.guards_may_change) {
        at = arena_.first_change(snap, Arena::Scope::NotOutputs);
        if (at != SIZE_MAX) return fail(counts, "wrote outside the outputs: " + arena_.where(at));
      }
    }
  }

 private:
  void fail(Counts& counts, const std::string& msg) {
    if (++counts.failures <= 20)
      ADD_FAILURE() << "case seed " << seed_ << " [" << v_.what << "]: " << msg;
  }
  static std::string join(const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
    return "{" + out + "}";
  }

  void build() {
    std::string broken;
    const bool break_shape = chance(r_, 0.1);
    params_ = random_params(r_, Params{}, break_shape ? &broken : nullptr);
    args_ = make_args(params_);
    for (const auto& n : tensor_names(args_)) all_names_.insert(n);
    for (auto& s : scalars(args_)) all_names_.insert(s.first);
    all_names_.insert("options.backend");
    opts_.backend = pick_of<Backend>(r_, {Backend::Auto, Backend::Serial, Backend::Portable});
    opts_.deterministic = chance(r_, 0.5);
    opts_.precision = chance(r_, 0.5) ? Precision::Strict : Precision::Default;
    if (break_shape) {
      v_ = {false, {}, false, "shape: " + broken};
      place();
      return;
    }
    // Mutation kinds; the structural ones (rank, extent, cu_seqlens length) act before placement
    // so that buffers are large enough for whatever the mutated extents say.
    std::vector<std::function<void()>> kinds = {
        [&] { place(); v_ = {true, {}, false, "valid"}; },
        [&] { place(); v_ = {true, {}, false, "valid"}; },
        [&] { place(); v_ = {true, {}, false, "valid"}; },
        [&] { place(); null_tensor(pick_tensor()); },
        [&] { place(); non_contiguous(pick_tensor()); },
        [&] { wrong_rank(pick_tensor()); },
        [&] { wrong_extent(pick_tensor()); },
        [&] { wrong_extent(pick_tensor()); },
        [&] { place(); alias(); },
        [&] { place(); alias(); },
        [&] { place(); bad_options(); },
        [&] { place(); two_at_once(); },
    };
    if (!scalars(args_).empty()) kinds.push_back([&] { place(); scalar(); });
    if constexpr (std::is_same_v<Args, VisionVarlenArgs>) {
      kinds.push_back([&] { cu_seqlens(); });
      kinds.push_back([&] { cu_seqlens(); });
    }
    kinds[static_cast<std::size_t>(pick(r_, 0, static_cast<int64_t>(kinds.size()) - 1))]();
  }

  void place(const std::vector<int64_t>& min_elems = {}) {
    arena_.place(args_, r_.next(), min_elems);
    finish(args_, params_);
  }
  std::vector<int64_t> sizes() {
    std::vector<int64_t> n;
    detail::for_each_tensor(args_, [&](const char*, auto& t, bool) { n.push_back(t.size()); });
    return n;
  }

  std::size_t pick_tensor() { return static_cast<std::size_t>(pick(r_, 0, static_cast<int64_t>(all_tensors()) - 1)); }
  std::size_t all_tensors() { return tensor_names(args_).size(); }

  void null_tensor(std::size_t i) {
    with_tensor(args_, i, [&](const char* name, auto& t, bool) {
      t.data = nullptr;
      v_ = {false, {name}, false, std::string("null ") + name};
    });
  }
  void non_contiguous(std::size_t i) {
    with_tensor(args_, i, [&](const char* name, auto& t, bool) {
      t.contiguous = false;
      v_ = {false, {name}, false, std::string("non-contiguous ") + name};
    });
  }
  void wrong_rank(std::size_t i) {
    const auto n = sizes();
    with_tensor(args_, i, [&](const char* name, auto& t, bool) {
      int rank = t.rank;
      while (rank == t.rank) rank = static_cast<int>(pick(r_, -1, 5));
      for (int k = t.rank; k < 4; ++k) t.extent[k] = pick(r_, 1, 3);
      std::ostringstream os;
      os << "rank " << t.rank << " -> " << rank << " of " << name;
      t.rank = rank;
      v_ = {false, {name}, false, os.str()};
    });
    place(n);
  }
  void wrong_extent(std::size_t i) {
    const auto n = sizes();
    const auto sources = shape_sources(args_);
    bool cu = false;
    with_tensor(args_, i, [&](const char* name, auto& t, bool) {
      if (std::string(name) == "cu_seqlens") {
        cu = true;
        return;
      }
      const bool source = sources.count(name) > 0;
      const int changes = source || t.rank < 2 || chance(r_, 0.7) ? 1 : 2;
      std::ostringstream os;
      os << "extents of " << name << ":";
      std::set<int> axes;
      while (static_cast<int>(axes.size()) < changes) axes.insert(static_cast<int>(pick(r_, 0, t.rank - 1)));
      for (int axis : axes) {
        const int64_t e = t.extent[axis];
        int64_t v = e;
        while (v == e)
          v = pick_of<int64_t>(r_, {0, -1, e + 1, e - 1, 2 * e, pick(r_, 1, 20), int64_t{1} << 31,
                                    int64_t{1} << 40, int64_t{1} << 62, std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()});
        os << " [" << axis << "] " << e << " -> " << v;
        t.extent[axis] = v;
      }
      // A change of one extent of a shape source changes its element count, so the tensors whose
      // shape repeats it no longer match: invalid, but another tensor may be named.
      v_ = {false, source ? std::set<std::string>{} : std::set<std::string>{name}, false, os.str()};
    });
    if (cu) return cu_seqlens();
    place(n);
  }

  // Points one output at (or next to) another tensor's bytes.
  void alias() {
    const auto& regs = arena_.regions();
    std::vector<std::size_t> outs, targets;
    for (std::size_t k = 0; k < regs.size(); ++k) {
      if (regs[k].output && regs[k].bytes > 0) outs.push_back(k);
      if (regs[k].bytes > 0) targets.push_back(k);
    }
    const std::size_t o = pick_of(r_, outs);
    std::size_t t = o;
    while (t == o) t = pick_of(r_, targets);
    const auto& R = regs;
    std::size_t elem = 0;
    with_tensor(args_, o, [&](const char*, auto& tt, bool) { elem = sizeof(Elem<decltype(tt.data)>); });
    const int64_t ob = static_cast<int64_t>(R[o].bytes), tb = static_cast<int64_t>(R[t].bytes);
    const int64_t tbeg = static_cast<int64_t>(R[t].begin), e = static_cast<int64_t>(elem);
    int64_t at = tbeg;
    std::string mode = "same start as";
    switch (pick(r_, 0, 4)) {
      case 1:
        if (tb > e) at = tbeg + e * pick(r_, 1, (tb - 1) / e), mode = "starting inside";
        break;
      case 2:
        if (ob > e) at = tbeg - e * pick(r_, 1, ob / e - 1), mode = "ending inside";
        break;
      case 3: at = (tbeg + tb + e - 1) / e * e, mode = "right after"; break;
      case 4: at = tbeg - ob, mode = "right before"; break;
      default: break;
    }
    // Independent overlap test against every other tensor.
    std::set<std::string> names{R[o].name};
    bool overlap = false;
    for (std::size_t k = 0; k < R.size(); ++k) {
      if (k == o || R[k].bytes == 0) continue;
      const int64_t b = static_cast<int64_t>(R[k].begin), end = b + static_cast<int64_t>(R[k].bytes);
      if (at < end && b < at + ob) {
        overlap = true;
        if (R[k].output) names.insert(R[k].name);
      }
    }
    with_tensor(args_, o, [&](const char*, auto& tt, bool) {
      tt.data = reinterpret_cast<decltype(tt.data)>(arena_.base() + at);
    });
    const std::string what = "output " + R[o].name + " " + mode + " " + R[t].name;
    if (overlap) v_ = {false, names, false, what};
    else v_ = {true, {}, true, what + " (no overlap: valid)"};
  }

  void scalar() {
    auto list = scalars(args_);
    auto& s = list[static_cast<std::size_t>(pick(r_, 0, static_cast<int64_t>(list.size()) - 1))];
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const double v = pick_of<double>(r_, {nan, -nan, inf, -inf, 1e39, -1e39, DBL_MAX, 3.5e38, -3.5e38, FLT_MAX,
                                          -FLT_MAX, 0.0, -0.0, 1e-45, 1e-300, -1.0, r_.normal()});
    *s.second = v;
    const bool ok = std::isfinite(v) && std::isfinite(static_cast<float>(v)) &&
                    !(std::string(s.first) == "norm_eps" && v < 0);
    std::ostringstream os;
    os << s.first << " = " << v;
    v_ = {ok, {s.first}, false, os.str()};
  }

  void bad_options() {
    opts_.backend = chance(r_, 0.7) ? Backend::Cuda : static_cast<Backend>(7);
    v_ = {false, {"options.backend"}, false, "backend " + std::to_string(static_cast<int>(opts_.backend))};
  }

  void two_at_once() {
    const std::size_t i = pick_tensor();
    std::size_t j = i;
    while (j == i) j = pick_tensor();
    null_tensor(i);
    const auto first = v_;
    if (!scalars(args_).empty() && chance(r_, 0.5)) {
      auto list = scalars(args_);
      auto& s = list[static_cast<std::size_t>(pick(r_, 0, static_cast<int64_t>(list.size()) - 1))];
      *s.second = std::numeric_limits<double>::quiet_NaN();
      v_ = {false, {*first.names.begin(), s.first}, false, first.what + " and " + s.first + " = NaN"};
    } else {
      non_contiguous(j);
      v_.names.insert(*first.names.begin());
      v_.what = first.what + " and " + v_.what;
    }
  }

  // cu_seqlens: contents or length changed (varlen only); valid when it still runs from 0 to S,
  // non-decreasing, with at least one sequence.
  void cu_seqlens() {
    if constexpr (std::is_same_v<Args, VisionVarlenArgs>) {
      std::vector<std::int32_t> cu = params_.cu;
      const auto S = static_cast<std::int32_t>(params_.S);
      std::ostringstream os;
      if (chance(r_, 0.5)) {
        const auto i = static_cast<std::size_t>(pick(r_, 0, static_cast<int64_t>(cu.size()) - 1));
        const std::int32_t old = cu[i];
        cu[i] = pick_of<std::int32_t>(r_, {-1, std::numeric_limits<std::int32_t>::min(), S + 1,
                                            std::numeric_limits<std::int32_t>::max(), old - 1, old + 1, 0, S,
                                            static_cast<std::int32_t>(pick(r_, -3, S + 3))});
        os << "cu_seqlens[" << i << "] " << old << " -> " << cu[i];
      } else {
        const int64_t L = static_cast<int64_t>(cu.size());
        int64_t L2 = L;
        while (L2 == L) L2 = pick_of<int64_t>(r_, {0, 1, L - 1, L + 1, L + 2, L + 5});
        os << "cu_seqlens length " << L << " -> " << L2 << ":";
        while (static_cast<int64_t>(cu.size()) > L2) cu.pop_back();
        while (static_cast<int64_t>(cu.size()) < L2)
          cu.push_back(pick_of<std::int32_t>(r_, {S, S, S + 1, static_cast<std::int32_t>(pick(r_, 0, S + 2)),
                                                  cu.back() - 1}));
        for (auto c : cu) os << ' ' << c;
      }
      bool ok = cu.size() >= 2 && cu[0] == 0 && cu.back() == S;
      for (std::size_t k = 1; k < cu.size(); ++k) ok = ok && cu[k] >= cu[k - 1];
      const auto n = sizes();
      args_.cu_seqlens.extent[0] = static_cast<int64_t>(cu.size());
      params_.cu = cu;
      place(n);
      v_ = {ok, {"cu_seqlens"}, false, os.str()};
    }
  }

  Rng r_;
  std::uint64_t seed_;
  Params params_;
  Args args_;
  Options opts_;
  Arena arena_;
  Verdict v_;
  std::set<std::string> all_names_;
};

template <class Params>
class FuzzArguments : public ::testing::Test {};
using AllParams = ::testing::Types<OutProjParams, GqaParams, MhaParams, VarlenParams>;
TYPED_TEST_SUITE(FuzzArguments, AllParams);

TYPED_TEST(FuzzArguments, MalformedRejectedUntouchedValidRuns) {
  ATTNBWD_SEED_TRACE();
  Rng master(fresh_seed(101));
  Counts counts;
  const int n = cases_per_op();
  for (int i = 0; i < n; ++i) FuzzCase<TypeParam>(master.next()).run(counts);
  ::testing::Test::RecordProperty("cases", counts.cases);
  ::testing::Test::RecordProperty("valid", counts.valid);
  ::testing::Test::RecordProperty("rejected", counts.rejected);
  std::printf("[ fuzz     ] %s: %d cases, %d valid (ran), %d malformed (rejected)\n", op_name(TypeParam{}),
              counts.cases, counts.valid, counts.rejected);
  EXPECT_EQ(counts.cases, n);
  EXPECT_EQ(counts.failures, 0);
  if (n >= 500) {  // the generator reaches both sides (about 1/4 of the cases are valid)
    EXPECT_GT(counts.valid, n / 10);
    EXPECT_GT(counts.rejected, n / 2);
  }
}

}  // namespace
}  // namespace attnbwd::test::rel
