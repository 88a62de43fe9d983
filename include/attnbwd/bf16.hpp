// attnbwd::bf16 — a library-owned 16-bit brain float.
//
// Kokkos' bhalf_t is a 4-byte float in host-only builds and absent in Kokkos 3.4, so the library
// carries its own: the upper 16 bits of an IEEE binary32, converted with round-to-nearest-even
// (the rounding PyTorch and cuBLAS use). Usable in host and device code; layout-compatible with
// __nv_bfloat16, so device code may reinterpret pointers.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ATTNBWD_HD __host__ __device__
#else
#define ATTNBWD_HD
#endif

namespace attnbwd {

struct bf16 {
  std::uint16_t bits;

  bf16() = default;  // trivial, so Views and arrays of bf16 stay trivially copyable
  ATTNBWD_HD explicit bf16(float f) : bits(from_float_bits(f)) {}

  ATTNBWD_HD static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r{};
    r.bits = b;
    return r;
  }

  ATTNBWD_HD explicit operator float() const { return to_float(); }

  ATTNBWD_HD float to_float() const {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }

  // Round-to-nearest-even; NaN stays NaN (quiet), infinities and overflow to infinity as IEEE does.
  ATTNBWD_HD static std::uint16_t from_float_bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
  }
};

static_assert(sizeof(bf16) == 2, "attnbwd::bf16 must be 2 bytes");

ATTNBWD_HD inline float to_float(bf16 x) { return x.to_float(); }
ATTNBWD_HD inline bf16 to_bf16(float f) { return bf16(f); }

}  // namespace attnbwd
