#include "attnbwd/options.hpp"

namespace attnbwd {

const char* to_string(Backend b) noexcept {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Serial: return "serial";
    case Backend::Portable: return "portable";
    case Backend::Cuda: return "cuda";
  }
  return "?";
}

const char* to_string(Precision p) noexcept {
  return p == Precision::Strict ? "strict" : "default";
}

}  // namespace attnbwd
