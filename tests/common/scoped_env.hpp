// An environment variable set for a scope (the fast path's A/B variant switches, backends/cuda/README.md "Switches"),
// removed when the scope ends, also when an assertion leaves it early.
#pragma once

#include <cstdlib>

namespace attnbwd::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* var, const char* value) : var_(var) { setenv(var_, value, 1); }
  ~ScopedEnv() { unsetenv(var_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* var_;
};

}  // namespace attnbwd::test
