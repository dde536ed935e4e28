// Prints the table of environment variables (fanstore/include/fanstore/env.hpp, the run-time ones, and
// env_tooling.hpp, the scripts' and the tests'): README.md's generated block
// (--markdown) or one "NAME<TAB>IDENTIFIER<TAB>DEFAULT" line per variable (--names), for tests/meta/check_env.py.
#include <cstdio>
#include <cstring>
#include <string>

#include "fanstore/env.hpp"
#include "fanstore/env_tooling.hpp"

namespace {

using fanstore::env::Scope;

// A '|' inside a cell would end the cell.
std::string Cell(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += '\\';
    out += *p;
  }
  return out;
}

void PrintTable(Scope scope, const char* heading) {
  std::printf("%s\n\n| variable | meaning | default | read by |\n|---|---|---|---|\n", heading);
  auto row = [&](const fanstore::env::Variable& v) {
    if (v.scope != scope) return;
    std::printf("| `%s` | %s | %s | %s |\n", v.name, Cell(v.meaning).c_str(), Cell(v.fallback).c_str(),
                Cell(v.readers).c_str());
  };
  for (const auto& v : fanstore::env::kVariables) row(v);
  for (const auto& v : fanstore::env::kToolingVariables) row(v);
}

void PrintMarkdown() {
  std::printf(
      "<!-- BEGIN env-table: generated from fanstore/include/fanstore/env.hpp and env_tooling.hpp; do not "
      "edit by hand -->\n");
  PrintTable(Scope::kRuntime,
             "Read at run time by the library and the programs (the interposer, `Client::FromEnv`, the CLI):");
  std::printf("\n");
  PrintTable(Scope::kScript, "Read by the scripts:");
  std::printf("\n");
  PrintTable(Scope::kTest,
             "Test plumbing (set by ctest or a test driver; listed so that nothing is read unannounced):");
  std::printf("<!-- END env-table -->\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--markdown") == 0) {
    PrintMarkdown();
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--names") == 0) {
#define FANSTORE_PRINT_NAME(id, name, scope, readers, meaning, fallback) \
  std::printf("%s\t%s\t%s\n", name, #id, fallback);
    FANSTORE_ENV_VARIABLES(FANSTORE_PRINT_NAME)
    FANSTORE_TOOLING_ENV_VARIABLES(FANSTORE_PRINT_NAME)
#undef FANSTORE_PRINT_NAME
    return 0;
  }
  std::fprintf(stderr, "usage: env_table --markdown | --names\n");
  return 2;
}
