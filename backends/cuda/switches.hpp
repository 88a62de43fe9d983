// Variant switches of the fast path, read from the environment on every call (for A/B timing and
// tests; README "Backends").
#pragma once

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

}  // namespace attnbwd::cuda
