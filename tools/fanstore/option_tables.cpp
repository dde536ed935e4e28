// Prints the option tables of docs/cli.md from the subcommands' own CLI11 definitions, so the docs cannot
// drift from `--help` (tests/meta/check_cli_tables.py compares and, with --write, rewrites them).
// Usage: fanstore_option_tables SUBCOMMAND...   One Markdown table per subcommand, in the order given.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"
#include "commands.hpp"

namespace {

// "-o, --output IMAGE", "--parts N", "SRC", "--stats": the names, then the value's name for an option
// that takes one (the type name up to any validator description CLI11 appends).
std::string Usage(const CLI::Option& o) {
  if (o.get_positional() && o.get_name(false, true) == o.get_name(true)) return "`" + o.get_name(true) + "`";
  std::string names = fanstore::cli_common::NamesWithoutFlagValues(o.get_name(false, true));
  for (std::string::size_type at; (at = names.find(",")) != std::string::npos && names[at + 1] != ' ';)
    names.insert(at + 1, " ");
  if (o.get_expected_min() > 0 || o.get_items_expected_max() > 0) {
    std::string type = o.get_type_name();
    type = type.substr(0, type.find(':'));
    if (!type.empty()) names += " " + type;
  }
  return "`" + names + "`";
}

// Table cells hold no newline and no unescaped '|'.
std::string Cell(std::string text) {
  for (auto& c : text)
    if (c == '\n') c = ' ';
  for (std::string::size_type at = 0; (at = text.find('|', at)) != std::string::npos; at += 2) text.insert(at, "\\");
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fanstore"};
  int exit_code = 0;
  fanstore::cli::AddAllCommands(app, exit_code);
  for (int i = 1; i < argc; ++i) {
    CLI::App* sub = nullptr;
    try {
      sub = app.get_subcommand(argv[i]);
    } catch (const CLI::OptionNotFound&) {
      std::cerr << "fanstore_option_tables: no subcommand '" << argv[i] << "' in this build\n";
      return 1;
    }
    if (i > 1) std::cout << "\n";
    std::cout << "| option | meaning | default |\n|---|---|---|\n";
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_name() == "--help" || o->get_group().empty()) continue;  // help, and hidden options
      std::string def = o->get_default_str();
      if (o->get_required()) def = "(required)";
      else if (def.empty() && o->get_expected_min() == 0 && o->get_items_expected_max() == 0) def = "off";
      std::cout << "| " << Usage(*o) << " | " << Cell(o->get_description()) << " | " << Cell(def) << " |\n";
    }
  }
  return exit_code;
}
