// A test case on the CUDA device: host inputs (HostCase), device copies (DeviceArgs), and a run()
// that poisons the device outputs (all bits set: NaN in bf16 and fp32) before each call, so an output
// element a call does not write fails the comparison. CUDA builds only.
#pragma once

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/device_args.hpp"
#include "tests/common/host_case.hpp"

namespace attnbwd::test {

template <class Args>
class CudaCase {
 public:
  CudaCase(const tools::TensorSet& in, const tools::Axes& axes) : host_(in, axes), dev_(host_.args) {}

  // One call through the dispatcher (must take the fast path), outputs back to the host case.
  void run(const Options& o = Options{}) {
    detail::for_each_tensor(dev_.args, [&](const char*, auto& t, bool output) {
      if (output) ASSERT_EQ(cudaMemset(raw(t), 0xff, bytes_of(t)), cudaSuccess);
    });
    ASSERT_EQ(detail::run(Kokkos::Cuda(), dev_.args, o), Backend::Cuda);
    Kokkos::fence();
    dev_.outputs_to(host_.args);
  }
  const HostCase<Args>& result() const { return host_; }
  // The device-side arguments run() passes (tests that change an input in place between calls).
  Args& device_args() { return dev_.args; }

 private:
  HostCase<Args> host_;
  DeviceArgs<Kokkos::Cuda, Args> dev_;
};

// Device copies of `host`'s tensors, each starting `offset` bytes into its own allocation (outputs
// copied too, so the NaN poison travels).
template <class Args>
class ShiftedArgs {
  using Bytes = Kokkos::View<unsigned char*, Kokkos::CudaSpace>;
  using HostBytes = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

 public:
  ShiftedArgs(const Args& host, std::size_t offset) : args(host), offset_(offset) {
    args.memory = Memory::Device;
    detail::for_each_tensor(args, [&](const char* name, auto& t, bool) {
      const std::size_t n = bytes_of(t);
      Bytes b(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(name)), n + offset);
      Kokkos::deep_copy(Kokkos::subview(b, Kokkos::make_pair(offset, offset + n)),
                        HostBytes(static_cast<unsigned char*>(raw(t)), n));
      t.data = reinterpret_cast<decltype(t.data)>(b.data() + offset);
      buffers_.push_back(b);
    });
  }

  void outputs_to(Args& host) const {
    std::size_t i = 0;
    detail::for_each_tensor(host, [&](const char*, auto& t, bool output) {
      const std::size_t n = bytes_of(t);
      if (output)
        Kokkos::deep_copy(HostBytes(static_cast<unsigned char*>(raw(t)), n),
                          Kokkos::subview(buffers_[i], Kokkos::make_pair(offset_, offset_ + n)));
      ++i;
    });
  }

  Args args;

 private:
  std::size_t offset_;
  std::vector<Bytes> buffers_;
};

// Small shapes of the three attention ops for the device reliability tests (determinism, NaN/Inf):
// 131 and 200 tokens are not multiples of 64; the varlen inputs have 3 sequences.
inline tools::Axes small_gqa_axes() {
  return {{"batch_size", 2}, {"seq_len", 131},  {"num_attention_heads", 8}, {"num_key_value_heads", 2},
          {"head_dim", 128}, {"hidden_size", 64}};
}
inline tools::Axes small_mha_axes() {
  return {{"batch_size", 2}, {"seq_len", 131}, {"num_heads", 2}, {"head_dim", 64}, {"embed_dim", 128}};
}
inline tools::Axes small_varlen_axes() {
  return {{"total_seq_len", 200}, {"num_sequences", 3}, {"num_heads", 2}, {"head_dim", 128}, {"hidden_size", 256}};
}

// True on a compute capability 9.0 device (where the sm_90a kernels run).
inline bool is_sm90() {
  int dev = 0;
  cudaDeviceProp p{};
  return cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess && p.major == 9 &&
         p.minor == 0;
}

template <class Args>
void expect_same_bits(const HostCase<Args>& got, const HostCase<Args>& want, const std::string& what) {
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (std::size_t i = 0; i < got.outputs.size(); ++i)
    EXPECT_TRUE(got.outputs[i] == want.outputs[i]) << what << ": output " << i << " differs";
}

}  // namespace attnbwd::test
