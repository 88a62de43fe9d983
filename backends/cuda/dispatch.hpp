// Runtime value -> template argument: dispatch_int<Max, Fallback>(v, f) calls f(std::integral_constant<int, v>{})
// for v in [1, Max] and f(std::integral_constant<int, Fallback>{}) otherwise (kernels instantiated per row
// width, chunk count, ...).
#pragma once

#include <type_traits>

namespace attnbwd::cuda {

template <int I, int Max, int Fallback, class F>
void dispatch_int_from(int v, F& f) {
  if constexpr (I > Max) {
    f(std::integral_constant<int, Fallback>{});
  } else {
    if (v == I)
      f(std::integral_constant<int, I>{});
    else
      dispatch_int_from<I + 1, Max, Fallback>(v, f);
  }
}

template <int Max, int Fallback, class F>
void dispatch_int(int v, F&& f) {
  dispatch_int_from<1, Max, Fallback>(v, f);
}

}  // namespace attnbwd::cuda
