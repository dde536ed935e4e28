// Every `fanstore` subcommand on one CLI::App: the binary parses with it, fanstore_option_tables prints it.
#include "commands.hpp"

#include <memory>

#include "cli_common.hpp"

namespace fanstore::cli {

void AddAllCommands(CLI::App& app, int& exit_code) {
  app.formatter(std::make_shared<cli_common::Formatter>());  // before the subcommands: they copy it
  app.require_subcommand(1);
  app.set_version_flag("--version", "fanstore 0.1.0");
  AddPackCommand(app, exit_code);
  AddInspectCommands(app, exit_code);
  AddRunCommand(app, exit_code);
  AddServeCommands(app, exit_code);
#ifdef FANSTORE_WITH_FUSE
  AddMountCommand(app, exit_code);
#endif
}

}  // namespace fanstore::cli
