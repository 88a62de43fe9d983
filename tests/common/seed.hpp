// Fresh random inputs for every test run, reproducible on demand: the seed comes from
// ATTNBWD_TEST_SEED when set, else from std::random_device, and is printed with every failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace attnbwd::test {

inline std::uint64_t base_seed() {
  static const std::uint64_t seed = [] {
    if (const char* s = std::getenv("ATTNBWD_TEST_SEED")) return static_cast<std::uint64_t>(std::strtoull(s, nullptr, 0));
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

// A seed for one test: the base seed mixed with a per-call tag; records it in the test's output.
inline std::uint64_t fresh_seed(std::uint64_t tag = 0) {
  const std::uint64_t s = base_seed() ^ (0x9e3779b97f4a7c15ull * (tag + 1));
  ::testing::Test::RecordProperty("seed", std::to_string(base_seed()));
  return s;
}

}  // namespace attnbwd::test

// Use in each test body so a failure prints how to reproduce it.
#define ATTNBWD_SEED_TRACE() \
  SCOPED_TRACE("reproduce with ATTNBWD_TEST_SEED=" + std::to_string(::attnbwd::test::base_seed()))
