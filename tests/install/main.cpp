// A downstream program using the installed attnbwd: out_proj_backward on a tiny shape, on the default
// execution space through the public View API, checked against a direct double loop written here
// (the library's own oracle is not installed). Exit status 0 = every check passed.
//
// Checks: the serial backend (runs on any space; device data is staged through the host), the default
// backend unless it reports "not written yet", and that a bad argument throws attnbwd::Error naming it.
#include <attnbwd/attnbwd.hpp>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
template <class T>
using View = Kokkos::View<T, Kokkos::LayoutRight, Mem>;

constexpr int B = 2, H = 3, S = 5, D = 4, E = H * D;  // hidden size E = 12, T = B*S = 10 tokens

// Deterministic values in [-2, 2), exactly representable in bf16.
struct Lcg {
  std::uint64_t s;
  attnbwd::bf16 next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) * 0x1.0p-53;
    return attnbwd::bf16(static_cast<float>(4.0 * u - 2.0));
  }
};

struct Expected {
  std::vector<double> value, scale;  // exact result, and the sum of |terms| (for the fp32 sum error)
};

// grad_weight = dYᵀ·X  [E,E];  grad_attn_output[b,h,s,d] = (dY·W)[b·S+s, h·D+d].
void reference(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& w,
               Expected& gw, Expected& gao) {
  gw.value.assign(E * E, 0.0);
  gw.scale.assign(E * E, 0.0);
  for (int o = 0; o < E; ++o)
    for (int i = 0; i < E; ++i)
      for (int t = 0; t < B * S; ++t) {
        const double p = double(dy[t * E + o]) * double(x[t * E + i]);
        gw.value[o * E + i] += p;
        gw.scale[o * E + i] += std::fabs(p);
      }
  gao.value.assign(B * H * S * D, 0.0);
  gao.scale.assign(B * H * S * D, 0.0);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < E; ++i) {
        const int at = ((b * H + i / D) * S + s) * D + i % D;
        for (int o = 0; o < E; ++o) {
          const double p = double(dy[(b * S + s) * E + o]) * double(w[o * E + i]);
          gao.value[at] += p;
          gao.scale[at] += std::fabs(p);
        }
      }
}

// A bf16 result rounded once from an fp32 sum: half a bf16 ulp (2^-9 relative) plus fp32 summation error.
int compare(const char* what, const std::vector<attnbwd::bf16>& got, const Expected& want) {
  int bad = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double g = got[k].to_float(), r = want.value[k];
    const double tol = std::ldexp(std::fabs(r), -8) + 1e-5 * want.scale[k];
    if (!(std::fabs(g - r) <= tol)) {
      if (bad < 5) std::printf("  %s[%zu] = %.8g, expected %.8g (tol %.3g)\n", what, k, g, r, tol);
      ++bad;
    }
  }
  return bad;
}

template <class V>
std::vector<attnbwd::bf16> to_host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<attnbwd::bf16>(h.data(), h.data() + h.size());
}

int run_and_check(const char* label, const attnbwd::OutProjInputs<Mem>& in, const Expected& gw,
                  const Expected& gao, const attnbwd::Options& opts) {
  View<attnbwd::bf16****> grad_attn_output("grad_attn_output", B, H, S, D);
  View<attnbwd::bf16**> grad_weight("grad_weight", E, E);
  Exec exec;
  try {
    attnbwd::out_proj_backward(exec, in, attnbwd::OutProjOutputs<Mem>{grad_attn_output, grad_weight}, opts);
  } catch (const attnbwd::Error& e) {
    if (opts.backend != attnbwd::Backend::Serial &&
        std::string(e.what()).find("not written yet") != std::string::npos) {
      std::printf("%s: skipped (%s)\n", label, e.what());
      return 0;
    }
    std::printf("%s: FAILED, threw: %s\n", label, e.what());
    return 1;
  }
  exec.fence();
  const int bad = compare("grad_weight", to_host(grad_weight), gw) +
                  compare("grad_attn_output", to_host(grad_attn_output), gao);
  std::printf("%s: %s\n", label, bad == 0 ? "ok" : "FAILED");
  return bad == 0 ? 0 : 1;
}

int run() {
  View<attnbwd::bf16***> grad_output("grad_output", B, S, E), reshaped("reshaped", B, S, E);
  View<attnbwd::bf16**> weight("weight", E, E);
  std::vector<float> dy, x, w;
  Lcg rng{20240607};
  auto fill = [&](auto& view, std::vector<float>& copy) {
    auto h = Kokkos::create_mirror_view(view);
    for (std::size_t k = 0; k < h.size(); ++k) {
      h.data()[k] = rng.next();
      copy.push_back(h.data()[k].to_float());
    }
    if (h.data() != view.data()) Kokkos::deep_copy(view, h);  // a host view is its own mirror
  };
  fill(grad_output, dy);
  fill(reshaped, x);
  fill(weight, w);
  Expected gw, gao;
  reference(dy, x, w, gw, gao);
  const attnbwd::OutProjInputs<Mem> in{grad_output, reshaped, weight};

  int failures = 0;
  attnbwd::Options serial;
  serial.backend = attnbwd::Backend::Serial;
  failures += run_and_check("out_proj_backward, serial backend", in, gw, gao, serial);
  failures += run_and_check("out_proj_backward, default backend", in, gw, gao, attnbwd::Options{});

  // A weight of the wrong shape: rejected before any write, naming the argument.
  View<attnbwd::bf16**> wrong("wrong", E, E + 1);
  View<attnbwd::bf16****> gao_out("gao", B, H, S, D);
  View<attnbwd::bf16**> gw_out("gw", E, E);
  try {
    attnbwd::out_proj_backward(Exec(), attnbwd::OutProjInputs<Mem>{grad_output, reshaped, wrong},
                               attnbwd::OutProjOutputs<Mem>{gao_out, gw_out}, serial);
    std::printf("validation: FAILED, a [%d,%d] weight was accepted\n", E, E + 1);
    ++failures;
  } catch (const attnbwd::Error& e) {
    const bool ok = e.argument() == "weight";
    std::printf("validation: %s (%s)\n", ok ? "ok" : "FAILED, wrong argument named", e.what());
    failures += ok ? 0 : 1;
  }
  return failures;
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  std::printf("attnbwd %s, Kokkos execution space %s\n", ATTNBWD_VERSION_STRING, Exec::name());
  int failures = 0;
  try {
    failures = run();
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    failures = 1;
  }
  Kokkos::finalize();
  std::printf("%s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
