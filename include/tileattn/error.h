// tileattn/error.h: the exception thrown for bad input; its message names argument and value.
#pragma once

#include <stdexcept>
#include <string>

namespace tileattn {

class Error : public std::invalid_argument {
 public:
  Error(std::string argument, std::string message)
      : std::invalid_argument(argument + ": " + message),
        argument_(std::move(argument)),
        message_(std::move(message)) {}
  // The argument at fault: "q", "k", "v", "out", "lse", "options.window_left", ...
  const std::string& argument() const { return argument_; }
  // What is wrong with it (what() is "argument: message").
  const std::string& message() const { return message_; }

 private:
  std::string argument_;
  std::string message_;
};

// A failure of the machine rather than of the input (a CUDA error, out of memory).
class RuntimeError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tileattn
