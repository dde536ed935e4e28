// Small helpers shared by the CLI subcommands: one-line errors, human sizes, terminal detection.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "fanstore/status.hpp"

namespace fanstore::cli {

// Prints "fanstore <cmd>: <message>" on stderr and returns 1 (the exit code to use).
int Fail(const std::string& cmd, const std::string& message);
int Fail(const std::string& cmd, const Status& s);
// A command line CLI11 refused: one line "fanstore <cmd>: <why>; <what to do>" on stderr; returns 1 (the usage
// errors' exit code, docs/cli.md). --help and --version are not errors: CLI11 prints them and 0 is returned.
int ParseFailure(CLI::App& app, const CLI::ParseError& e, int argc, char** argv);
// A check that an integer option lies in [lo, hi], whose refusal says what to do ("99 is outside 0-22; <advice>").
CLI::Validator InRange(long lo, long hi, const std::string& advice);
// A byte count with a unit (4G, 512MiB; k, m, g... are powers of 1024): CLI11's AsSizeValue, after refusing a
// negative count, which AsSizeValue takes as a huge one.
CLI::Validator SizeValue();
std::string HumanBytes(uint64_t bytes);  // "1.5 GiB"
bool StderrIsTerminal();

}  // namespace fanstore::cli
