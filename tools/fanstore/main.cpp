// `fanstore`: parse the command line and dispatch to one subcommand; the logic lives in the libraries.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli_util.hpp"
#include "commands.hpp"

// The interposer leaves the fanstore binary itself alone (it looks this symbol up when it starts): a
// `fanstore run` started inside a job that already runs under it must see the real mount point.
extern "C" __attribute__((visibility("default"), used)) const int fanstore_cli_no_preload = 1;

// Every command may need many files open at once: a reader (verify, info, cat, mount, and the programs `run` starts,
// which inherit the limit) keeps one per partition, pack writes every partition at once, and serve holds one per
// client connection. Allow as many as the hard limit lets us.
static void RaiseOpenFileLimit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char** argv) {
  RaiseOpenFileLimit();
  CLI::App app{"FanStore: pack a dataset into an image and serve it to unmodified training jobs"};
  int exit_code = 0;
  fanstore::cli::AddAllCommands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return fanstore::cli::ParseFailure(app, e, argc, argv);
  }
  // What ls, stat, info and verify printed must have reached stdout (a full disk, a closed pipe): else exit 1.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "fanstore: cannot write the output: %s\n", errno != 0 ? std::strerror(errno) : "write error");
    return exit_code != 0 ? exit_code : 1;
  }
  return exit_code;
}
