// CLI11 pieces both command-line programs share (`fanstore`, `fanstore-train`), so that they word things alike.
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <optional>
#include <regex>
#include <string>

namespace fanstore::cli_common {

// CLI11's "--x: At Most 1 required but received 2" as "--x is given 2 times: pass it once"; nullopt for others.
inline std::optional<std::string> GivenTwice(const std::string& why) {
  static const std::regex kTwice("^(-[-A-Za-z0-9]+): At Most 1 required but received (\\d+)$");
  std::smatch m;
  if (!std::regex_match(why, m, kTwice)) return std::nullopt;
  return m[1].str() + " is given " + m[2].str() + " times: pass it once";
}

// CLI11's "Could not convert: --epochs = 1e12" (a value its type cannot hold, a word for a switch) as a sentence
// that names the option and the value; nullopt for others.
inline std::optional<std::string> NotConverted(const std::string& why) {
  static const std::regex kConvert("^Could not convert: (-[-A-Za-z0-9]+) = (.*)$");
  std::smatch m;
  if (!std::regex_match(why, m, kConvert)) return std::nullopt;
  return m[1].str() + " " + m[2].str() + " is not a value " + m[1].str() +
         " takes (a number in its range; on or off for a switch)";
}

// The first option among argv[first..argc) (before a `--`) that `app` does not know, or nullopt. CLI11 checks what is
// required first and names left-over words, so a misspelt option surfaces as "--model is required" or as its value.
inline std::optional<std::string> UnknownOption(const CLI::App& app, int first, int argc, char** argv) {
  for (int i = first; i < argc && std::string(argv[i]) != "--"; ++i) {
    const std::string arg = argv[i];
    // An option's name: `--long[=value]` or `-x`, not a negative number given as a value.
    if (arg.size() < 2 || arg[0] != '-' || std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.')
      continue;
    const std::string name = arg.substr(0, arg.find('='));
    const bool one_name = arg[1] == '-' || name.size() == 2;  // not a run of short flags (-abc)
    if (one_name && app.get_option_no_throw(name) == nullptr) return name;
  }
  return std::nullopt;
}

// An option's names without CLI11's "{false}" after a negated flag ("--no-doorbell{false}"), which reads like a
// default value.
inline std::string NamesWithoutFlagValues(std::string names) {
  for (std::string::size_type at; (at = names.find('{')) != std::string::npos;)
    names.erase(at, names.find('}', at) + 1 - at);
  return names;
}

// --help's formatter: the names as NamesWithoutFlagValues gives them.
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    return NamesWithoutFlagValues(CLI::Formatter::make_option_name(opt, is_positional));
  }
};

}  // namespace fanstore::cli_common
