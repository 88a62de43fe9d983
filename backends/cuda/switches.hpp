// Variant switches of the fast path, read from the environment on every call (for A/B timing and
// tests; backends/cuda/README.md "Switches").
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "attnbwd/error.hpp"

namespace attnbwd::cuda {

// The index of the value of environment variable `var` in `values`; 0 (the first value, the
// default) when it is unset or empty. Any other value is an Error naming `var`.
inline int env_switch(const char* var, std::initializer_list<const char*> values) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return 0;
  int i = 0;
  std::string expected;
  for (const char* name : values) {
    if (std::strcmp(v, name) == 0) return i;
    expected += (i ? ", " : "") + std::string(name);
    ++i;
  }
  throw Error(var, "expected one of " + expected + ", got \"" + v + "\"");
}

// `of132` of an H200's 132 SMs scaled to a device of `sms` SMs (at least 1): the SM count targets measured there.
inline int sms_of_132(int sms, int of132) { return std::max(1, sms * of132 / 132); }

// The SM target of a GEMM beside work that takes `taken` of the device's `sms` SMs: the others, or 0 (every SM) where the
// other work takes none or all of them.
inline int sms_beside(int sms, int taken) { return taken > 0 && taken < sms ? sms - taken : 0; }

// An SM count for Gemm::sm_target from environment variable `var`: unset, empty or "auto" gives `auto_value`, "off"
// gives 0 (every SM), else a count 1..sms; any other value is an Error naming `var`.
inline int sm_target_switch(const char* var, int sms, int auto_value) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return auto_value;
  if (std::strcmp(v, "off") == 0) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > sms)
    throw Error(var, "expected auto, off or an SM count 1-" + std::to_string(sms) + ", got \"" + std::string(v) + "\"");
  return static_cast<int>(n);
}

}  // namespace attnbwd::cuda
