// attnbwd::Error — every rejected argument and every failed backend call throws this.
#pragma once

#include <stdexcept>
#include <string>

namespace attnbwd {

class Error : public std::runtime_error {
 public:
  // `argument` names the offending input/output/option (empty when the error is not about one).
  Error(std::string argument, const std::string& what)
      : std::runtime_error(argument.empty() ? what : argument + ": " + what),
        argument_(std::move(argument)) {}
  explicit Error(const std::string& what) : Error(std::string(), what) {}

  const std::string& argument() const noexcept { return argument_; }

 private:
  std::string argument_;
};

}  // namespace attnbwd
