// Small helpers shared by the CLI subcommands: one-line errors, human sizes, terminal detection.
#pragma once

#include <cstdint>
#include <string>

#include "fanstore/status.hpp"

namespace fanstore::cli {

// Prints "fanstore <cmd>: <message>" on stderr and returns 1 (the exit code to use).
int Fail(const std::string& cmd, const std::string& message);
int Fail(const std::string& cmd, const Status& s);
std::string HumanBytes(uint64_t bytes);  // "1.5 GiB"
bool StderrIsTerminal();

}  // namespace fanstore::cli
