// GoogleTest main with Kokkos initialised once for the whole run. On Linux a fatal signal (a crash in a test or in a
// thread it started) prints the running test's name and the crashing thread's stack (module+offset frames, for
// addr2line) before the process dies as it would have: a crash on a machine without a debugger still says where.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#if defined(__linux__) && __has_include(<execinfo.h>)
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace {

void say(const char* s) {
  if (s != nullptr) (void)!write(STDERR_FILENO, s, std::strlen(s));
}

extern "C" void on_fatal_signal(int sig) {
  char num[12];  // sig in decimal, written from the end
  char* d = num + sizeof num;
  *--d = '\0';
  for (unsigned v = static_cast<unsigned>(sig); d == num + sizeof num - 1 || v > 0; v /= 10)
    *--d = static_cast<char>('0' + v % 10);
  say("\n*** attnbwd_tests: fatal signal ");
  say(d);
  // Not async-signal-safe, but the process is going down anyway; the test's name is worth the risk.
  if (const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info()) {
    say(" in ");
    say(t->test_suite_name());
    say(".");
    say(t->name());
  }
  say("; stack of the crashing thread:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_crash_report() {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
}

}  // namespace
#else
namespace {
void install_crash_report() {}
}  // namespace
#endif

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  install_crash_report();
  Kokkos::ScopeGuard kokkos(argc, argv);
  return RUN_ALL_TESTS();
}
