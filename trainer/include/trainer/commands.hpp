// The commands behind fanstore-train, as library functions so the binary's main stays a thin parser.
#pragma once

#include <exception>
#include <iosfwd>
#include <string>

#include "trainer/models.hpp"

namespace fanstore::trainer {

struct DescribeOptions {
  std::string model;
  ModelOptions model_options;
};

// Builds the model and prints its layer table and "parameters: N". Returns the process exit code;
// errors go to `err` as one line.
int describe_command(const DescribeOptions& options, std::ostream& out, std::ostream& err);

// What an error's line says: its what(), or for std::bad_alloc what ran out and what to try.
std::string error_text(const std::exception& error);

}  // namespace fanstore::trainer
