// The serial oracle's two fp32 ops with their outputs left in double: the same code path as the
// public entry points (serial.hpp), which only add the final rounding to float. Tests use these to
// separate the oracle's math from that one rounding. They read the input tensors of `a` and ignore
// its outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "attnbwd/args.hpp"
#include "serial/loops.hpp"

namespace attnbwd::serial {

namespace exact {

struct VisionMhaGrads {
  std::vector<double> grad_x, grad_qkv_weight, grad_qkv_bias, grad_out_weight, grad_out_bias,
      grad_ln_weight, grad_ln_bias;
};
VisionMhaGrads vision_mha_norm_backward(const VisionMhaShape& s, const VisionMhaArgs& a);

struct VisionVarlenGrads {
  std::vector<double> grad_hidden_states, grad_qkv_weight, grad_qkv_bias, grad_proj_weight,
      grad_proj_bias;
};
VisionVarlenGrads vision_varlen_rope_backward(const VisionVarlenShape& s,
                                              const VisionVarlenArgs& a);

}  // namespace exact

// Helpers shared by the two fp32 op files.
namespace fp32_detail {

// serial::gemm over tiles of C, so a tile stays in cache across the K loop (the plain helper
// streams all of C once per k: ~80 GB of traffic for the 017 weight gradients). Each C element
// still sums its k terms in ascending order, so the result is bit-identical to one gemm call.
template <class TA, class TB>
void gemm_tiled(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda,
                bool trans_a, const TB* B, std::int64_t ldb, bool trans_b, double* C,
                std::int64_t ldc) {
  constexpr std::int64_t kTileM = 64, kTileN = 256;  // a 128 KiB tile of C
  for (std::int64_t i0 = 0; i0 < M; i0 += kTileM) {
    const std::int64_t m = M - i0 < kTileM ? M - i0 : kTileM;
    const TA* a_tile = trans_a ? A + i0 : A + i0 * lda;
    for (std::int64_t j0 = 0; j0 < N; j0 += kTileN) {
      const std::int64_t n = N - j0 < kTileN ? N - j0 : kTileN;
      const TB* b_tile = trans_b ? B + j0 * ldb : B + j0;
      gemm(m, n, K, a_tile, lda, trans_a, b_tile, ldb, trans_b, C + i0 * ldc + j0, ldc);
    }
  }
}

// Sums over the rows (tokens) of a [rows, cols] matrix, in row order: the bias gradients.
template <class T>
std::vector<double> column_sums(const T* m, std::int64_t rows, std::int64_t cols) {
  std::vector<double> sums(static_cast<std::size_t>(cols), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) sums[c] += to_double(m[r * cols + c]);
  return sums;
}

// The one rounding of the oracle: double result -> float output.
inline void store_rounded(const std::vector<double>& src, const Tensor<float>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) dst.data[i] = static_cast<float>(src[i]);
}

}  // namespace fp32_detail
}  // namespace attnbwd::serial
