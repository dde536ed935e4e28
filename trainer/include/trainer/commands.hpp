// The commands behind fanstore-train, as library functions so the binary's main stays a thin parser.
#pragma once

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

}  // namespace fanstore::trainer
