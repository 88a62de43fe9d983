// The public Kokkos-View API wires every tensor to the right argument: running an op through it
// gives bit-identical results to calling the oracle directly on the same buffers.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/attnbwd.hpp"
#include "serial/serial.hpp"
#include "tests/common/arg_fixtures.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd::test {
namespace {

using HostMem = Kokkos::HostSpace;

template <class T, class Tn>
detail::View<T, HostMem> view(const Tn& t) {
  using V = detail::View<T, HostMem>;
  switch (t.rank) {
    case 1: return V(t.data, t.extent[0]);
    case 2: return V(t.data, t.extent[0], t.extent[1]);
    case 3: return V(t.data, t.extent[0], t.extent[1], t.extent[2]);
    default: return V(t.data, t.extent[0], t.extent[1], t.extent[2], t.extent[3]);
  }
}

template <class Exec>
void call(const Exec& e, const OutProjArgs& a, const Options& o) {
  OutProjInputs<HostMem> in{view<const bf16***>(a.grad_output), view<const bf16***>(a.reshaped),
                            view<const bf16**>(a.weight)};
  OutProjOutputs<HostMem> out{view<bf16****>(a.grad_attn_output), view<bf16**>(a.grad_weight)};
  out_proj_backward(e, in, out, o);
}

template <class Exec>
void call(const Exec& e, const GqaRopeArgs& a, const Options& o) {
  GqaRopeInputs<HostMem> in;
  in.grad_output = view<const bf16***>(a.grad_output);
  in.hidden_states = view<const bf16***>(a.hidden_states);
  in.cos = view<const bf16***>(a.cos);
  in.sin = view<const bf16***>(a.sin);
  in.q_weight = view<const bf16**>(a.q_weight);
  in.k_weight = view<const bf16**>(a.k_weight);
  in.v_weight = view<const bf16**>(a.v_weight);
  in.o_weight = view<const bf16**>(a.o_weight);
  in.query_states = view<const bf16****>(a.query_states);
  in.key_states = view<const bf16****>(a.key_states);
  in.value_states = view<const bf16****>(a.value_states);
  in.attn_weights = view<const bf16****>(a.attn_weights);
  in.attn_output = view<const bf16***>(a.attn_output);
  in.scaling = a.scaling;
  GqaRopeOutputs<HostMem> out{view<bf16***>(a.grad_hidden_states), view<bf16**>(a.grad_q_weight),
                              view<bf16**>(a.grad_k_weight), view<bf16**>(a.grad_v_weight),
                              view<bf16**>(a.grad_o_weight)};
  gqa_rope_backward(e, in, out, o);
}

template <class Exec>
void call(const Exec& e, const VisionMhaArgs& a, const Options& o) {
  VisionMhaInputs<HostMem> in;
  in.grad_output = view<const float***>(a.grad_output);
  in.x = view<const float***>(a.x);
  in.x_mean = view<const float***>(a.x_mean);
  in.x_var = view<const float***>(a.x_var);
  in.x_norm = view<const float***>(a.x_norm);
  in.ln_weight = view<const float*>(a.ln_weight);
  in.qkv_weight = view<const float**>(a.qkv_weight);
  in.q = view<const float****>(a.q);
  in.k = view<const float****>(a.k);
  in.v = view<const float****>(a.v);
  in.attn_weights = view<const float****>(a.attn_weights);
  in.attn_output = view<const float***>(a.attn_output);
  in.out_weight = view<const float**>(a.out_weight);
  in.scale = a.scale;
  in.norm_eps = a.norm_eps;
  VisionMhaOutputs<HostMem> out{view<float***>(a.grad_x),        view<float**>(a.grad_qkv_weight),
                                view<float*>(a.grad_qkv_bias),   view<float**>(a.grad_out_weight),
                                view<float*>(a.grad_out_bias),   view<float*>(a.grad_ln_weight),
                                view<float*>(a.grad_ln_bias)};
  vision_mha_norm_backward(e, in, out, o);
}

template <class Exec>
void call(const Exec& e, const VisionVarlenArgs& a, const Options& o) {
  VisionVarlenInputs<HostMem> in;
  in.grad_output = view<const float**>(a.grad_output);
  in.hidden_states = view<const float**>(a.hidden_states);
  in.qkv_weight = view<const float**>(a.qkv_weight);
  in.qkv_bias = view<const float*>(a.qkv_bias);
  in.proj_weight = view<const float**>(a.proj_weight);
  in.proj_bias = view<const float*>(a.proj_bias);
  in.cos = view<const float**>(a.cos);
  in.sin = view<const float**>(a.sin);
  in.cu_seqlens = view<const std::int32_t*>(a.cu_seqlens);
  in.attention_dropout = a.attention_dropout;
  in.scaling = a.scaling;
  VisionVarlenOutputs<HostMem> out{view<float**>(a.grad_hidden_states), view<float**>(a.grad_qkv_weight),
                                   view<float*>(a.grad_qkv_bias), view<float**>(a.grad_proj_weight),
                                   view<float*>(a.grad_proj_bias)};
  vision_varlen_rope_backward(e, in, out, o);
}

void oracle(const OutProjArgs& a) { serial::out_proj_backward(validate(a), a); }
void oracle(const GqaRopeArgs& a) { serial::gqa_rope_backward(validate(a), a); }
void oracle(const VisionMhaArgs& a) { serial::vision_mha_norm_backward(validate(a), a); }
void oracle(const VisionVarlenArgs& a) { serial::vision_varlen_rope_backward(validate(a), a); }

// Byte images of every output.
template <class Args>
std::vector<std::vector<unsigned char>> output_bytes(Args& a) {
  std::vector<std::vector<unsigned char>> r;
  detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
    if (!output) return;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data);
    r.emplace_back(p, p + static_cast<std::size_t>(t.size()) * sizeof(*t.data));
  });
  return r;
}

template <class Args>
void poison(Args& a) {
  detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
    if (output) std::memset(static_cast<void*>(const_cast<void*>(static_cast<const void*>(t.data))),
                            Buffers::kPoison, static_cast<std::size_t>(t.size()) * sizeof(*t.data));
  });
}

template <class Fixture>
class ViewsApi : public ::testing::Test {};
using Fixtures = ::testing::Types<OutProjFixture, GqaRopeFixture, VisionMhaFixture, VisionVarlenFixture>;
TYPED_TEST_SUITE(ViewsApi, Fixtures);

template <class Exec, class Fixture>
void check_space(const char* space) {
  SCOPED_TRACE(space);
  Fixture f(fresh_seed(21));
  oracle(f.a);
  const auto want = output_bytes(f.a);
  poison(f.a);
  Options o;
  o.backend = Backend::Serial;
  call(Exec(), f.a, o);
  Exec().fence();
  EXPECT_EQ(output_bytes(f.a), want);
}

TEST(ViewsApi, AutoResolvesToPortableBeforeTheOpIsKnown) {
  EXPECT_EQ(detail::resolve_backend(Kokkos::DefaultHostExecutionSpace(), Backend::Auto), Backend::Portable);
  EXPECT_EQ(detail::resolve_backend(Kokkos::DefaultExecutionSpace(), Backend::Auto), Backend::Portable);
  EXPECT_EQ(detail::resolve_backend(Kokkos::DefaultHostExecutionSpace(), Backend::Serial), Backend::Serial);
}

TYPED_TEST(ViewsApi, MatchesOracleBitForBit) {
  ATTNBWD_SEED_TRACE();
#ifdef KOKKOS_ENABLE_SERIAL
  check_space<Kokkos::Serial, TypeParam>("Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  check_space<Kokkos::OpenMP, TypeParam>("OpenMP");
#endif
}

#if defined(KOKKOS_ENABLE_CUDA)
// Device memory with the serial backend: the oracle runs on host copies staged by the library.
template <class Fixture>
void check_device_staging() {
  using Exec = Kokkos::Cuda;
  using Bytes = Kokkos::View<unsigned char*, Exec::memory_space>;
  using HostBytes = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Fixture f(fresh_seed(23));
  oracle(f.a);
  const auto want = output_bytes(f.a);
  poison(f.a);
  auto d = f.a;
  d.memory = Memory::Device;
  std::vector<Bytes> keep;
  detail::for_each_tensor(d, [&](const char* name, auto& t, bool) {
    const std::size_t n = static_cast<std::size_t>(t.size()) * sizeof(*t.data);
    Bytes b(std::string(name), n);
    Kokkos::deep_copy(b, HostBytes(reinterpret_cast<unsigned char*>(const_cast<void*>(
                                       static_cast<const void*>(t.data))), n));
    t.data = reinterpret_cast<decltype(t.data)>(b.data());
    keep.push_back(b);
  });
  if constexpr (std::is_same_v<decltype(d), VisionVarlenArgs>) d.cu_seqlens_host = nullptr;
  Options o;
  o.backend = Backend::Serial;
  detail::run(Exec(), d, o);
  Exec().fence();
  std::size_t i = 0;
  detail::for_each_tensor(f.a, [&](const char*, auto& t, bool output) {
    if (output) {
      const std::size_t n = static_cast<std::size_t>(t.size()) * sizeof(*t.data);
      Kokkos::deep_copy(HostBytes(reinterpret_cast<unsigned char*>(const_cast<void*>(
                                      static_cast<const void*>(t.data))), n), keep[i]);
    }
    ++i;
  });
  EXPECT_EQ(output_bytes(f.a), want);
}

TYPED_TEST(ViewsApi, SerialBackendStagesDeviceMemory) {
  ATTNBWD_SEED_TRACE();
  check_device_staging<TypeParam>();
}
#endif

TEST(ViewsApi, StridedViewIsRejected) {
  ATTNBWD_SEED_TRACE();
  OutProjFixture f(fresh_seed(22));
  // A column block of a wider matrix: still LayoutRight, but rows are 16 apart, not 8.
  const std::int64_t Hd = f.a.weight.extent[0];
  Kokkos::View<bf16**, Kokkos::LayoutRight, HostMem> wide("wide", Hd, 2 * Hd);
  detail::View<const bf16**, HostMem> strided = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0L, Hd));
  ASSERT_FALSE(strided.span_is_contiguous());
  OutProjInputs<HostMem> in{view<const bf16***>(f.a.grad_output), view<const bf16***>(f.a.reshaped),
                            strided};
  OutProjOutputs<HostMem> out{view<bf16****>(f.a.grad_attn_output), view<bf16**>(f.a.grad_weight)};
  try {
    out_proj_backward(Kokkos::DefaultHostExecutionSpace(), in, out);
    ADD_FAILURE() << "accepted a strided view";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "weight") << e.what();
  }
}

}  // namespace
}  // namespace attnbwd::test
