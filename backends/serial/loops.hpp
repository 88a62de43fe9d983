// Plain-loop building blocks of the serial oracle, all accumulating in double.
#pragma once

#include <cstdint>
#include <vector>

#include "attnbwd/bf16.hpp"

namespace attnbwd::serial {

inline double to_double(double x) { return x; }
inline double to_double(float x) { return x; }
inline double to_double(bf16 x) { return x.to_float(); }

// C[M,N] = op(A)·op(B) in double, where op(A) is [M,K] and op(B) is [K,N]; all row-major.
// A is [M,K] (lda = K) or, with trans_a, [K,M]; B is [K,N] or, with trans_b, [N,K].
// Element (i,j) of A is read at A[i*ldA + j]: callers pass leading dimensions explicitly so head
// slices of larger tensors can be used in place.
template <class TA, class TB>
void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, bool trans_a,
          const TB* B, std::int64_t ldb, bool trans_b, double* C, std::int64_t ldc) {
  std::vector<double> brow(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.0;
  // i-k-j order: the inner loop runs along a row of C and a row of op(B).
  for (std::int64_t k = 0; k < K; ++k) {
    for (std::int64_t j = 0; j < N; ++j)
      brow[j] = to_double(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
    for (std::int64_t i = 0; i < M; ++i) {
      const double a = to_double(trans_a ? A[k * lda + i] : A[i * lda + k]);
      if (a == 0.0) continue;
      double* c = C + i * ldc;
      for (std::int64_t j = 0; j < N; ++j) c[j] += a * brow[j];
    }
  }
}

}  // namespace attnbwd::serial
