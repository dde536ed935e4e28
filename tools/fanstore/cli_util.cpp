// Shared CLI helpers (see cli_util.hpp).
#include "cli_util.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <vector>

#include "cli_common.hpp"

namespace fanstore::cli {

int Fail(const std::string& cmd, const std::string& message) {
  std::fprintf(stderr, "fanstore %s: %s\n", cmd.c_str(), message.c_str());
  return 1;
}

int Fail(const std::string& cmd, const Status& s) { return Fail(cmd, s.ToString()); }

int ParseFailure(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (dynamic_cast<const CLI::Success*>(&e)) return app.exit(e);  // --help, --version
  // The subcommand being parsed, if any (its name goes in front, as for every other error of it).
  std::vector<CLI::App*> parsed = app.get_subcommands();
  if (parsed.empty()) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    std::string why = argc < 2 ? "give a command: "
                      : argv[1][0] != '-'
                          ? "no command " + Printable(argv[1]) + "; the commands are "
                          : "unknown option " + Printable(argv[1]) + " before the command; give a command first: ";
    std::fprintf(stderr, "fanstore: %s%s (`fanstore --help` says what each does)\n", why.c_str(), names.c_str());
    return 1;
  }
  std::string cmd = parsed.back()->get_name(), why = e.what();
  // A missing positional with an unknown option left over (`cat IMG -dash`): CLI11 checks requirements first and
  // would say "PATH is required"; the option is what went wrong.
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    for (const std::string& arg : parsed.back()->remaining())
      if (arg.size() > 1 && arg[0] == '-' && arg != "--")
        return Fail(cmd, "unknown option " + Printable(arg) + "; a name that starts with '-' goes after `--` (`-- " +
                             Printable(arg) + "`); `fanstore " + cmd + " --help` shows its usage");
  }
  // Arguments left over: CLI11 names what was left, which with a misspelt option is its value or a later word
  // (`run --imgae img -- true` blamed `true`). The first option before `--` that the command does not know is what
  // went wrong.
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    if (auto name = cli_common::UnknownOption(*parsed.back(), 2, argc, argv))
      return Fail(cmd, "unknown option " + Printable(*name) + "; `fanstore " + cmd + " --help` lists its options");
  }
  if (auto twice = cli_common::GivenTwice(why)) return Fail(cmd, *twice);
  if (auto value = cli_common::NotConverted(why))
    return Fail(cmd, *value + "; `fanstore " + cmd + " --help` lists its options");
  // InRange's refusal already says what to do: "--level: 99 is outside ..." reads "--level 99 is outside ...".
  static const std::regex kOwnAdvice("^(-[-A-Za-z0-9]+): (\\S+ is (outside |not a whole number;).*)$");
  std::smatch m;
  if (std::regex_match(why, m, kOwnAdvice)) return Fail(cmd, m[1].str() + " " + m[2].str());
  // CLI11 starts its sentences with a capital ("The following arguments..."); ours do not (SRC stays SRC).
  if (why.size() > 1 && std::isupper(static_cast<unsigned char>(why[0])) &&
      std::islower(static_cast<unsigned char>(why[1])))
    why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  return Fail(cmd, why + "; `fanstore " + cmd + " --help` shows its usage");
}

CLI::Validator SizeValue() {
  const CLI::AsSizeValue as_size(false);
  return CLI::Validator(
      [as_size](std::string& value) -> std::string {
        if (value.find('-') != std::string::npos) return "a size >= 0 is needed, not " + value;
        const std::string given = value;
        std::string why = as_size(value);
        // A number past 2^64 - 1 would become 2^64 - 1 rather than be refused.
        errno = 0;
        if (why.empty() && (std::strtoull(value.c_str(), nullptr, 10), errno == ERANGE))
          why = "a size below 16E is needed, not " + given;
        return why;
      },
      as_size.get_description());
}

CLI::Validator InRange(long lo, long hi, const std::string& advice) {
  std::string range = std::to_string(lo) + "-" + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range, advice](std::string& value) -> std::string {
        long v = 0;
        size_t used = 0;
        try {
          v = std::stol(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size() || used == 0) return value + " is not a whole number; " + advice;
        if (v < lo || v > hi) return value + " is outside " + range + "; " + advice;
        return std::string();
      },
      "INT in [" + range + "]");
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace fanstore::cli
