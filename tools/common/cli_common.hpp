// CLI11 pieces both command-line programs share (`fanstore`, `fanstore-train`), so that they word things alike.
#pragma once

#include <CLI/CLI.hpp>

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
