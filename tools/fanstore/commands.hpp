// Registration of the `fanstore` subcommands; each lives in its own cmd_*.cpp and stays thin.
#pragma once

#include <CLI/CLI.hpp>

namespace fanstore::cli {

// All of them, with the version flag: what `fanstore` parses and fanstore_option_tables prints.
void AddAllCommands(CLI::App& app, int& exit_code);

// Each Add*Command registers its subcommand(s) on `app` with a callback that sets `exit_code`.
void AddPackCommand(CLI::App& app, int& exit_code);      // pack, convert
void AddInspectCommands(CLI::App& app, int& exit_code);  // ls, cat, stat, info, verify
void AddRunCommand(CLI::App& app, int& exit_code);
void AddServeCommands(CLI::App& app, int& exit_code);  // serve (MPI daemon), wait
#ifdef FANSTORE_WITH_FUSE
void AddMountCommand(CLI::App& app, int& exit_code);
#endif

}  // namespace fanstore::cli
