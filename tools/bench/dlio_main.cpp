// fanstore-dlio: DLIO-style emulation of one MLPerf Storage workload over a file list; prints one CSV line.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "bench_util.hpp"
#include "dlio_emulator.hpp"

int main(int argc, char** argv) {
  fanstore::bench::DlioConfig c;
  std::string root, list, label = "run";
  bool header = false;
  CLI::App app{"DLIO-style loop: reader threads prefetch batches, a sleep per batch emulates the accelerator"};
  app.add_option("--path", root, "Root directory the list is relative to")->required();
  app.add_option("--list", list, "File with one sample path per line, relative to --path")->required();
  app.add_option("--label", label, "First CSV column (e.g. tmpfs, disk, fanstore)");
  app.add_option("--batch", c.batch, "Samples per batch")->capture_default_str();
  app.add_option("--threads", c.threads, "Reader threads (DLIO read_threads)")->capture_default_str();
  app.add_option("--prefetch", c.prefetch, "Batches queued per reader thread")->capture_default_str();
  app.add_option("--compute", c.compute_s, "Emulated compute seconds per batch (0: pure I/O)")->capture_default_str();
  app.add_option("--epochs", c.epochs, "Epochs")->capture_default_str();
  app.add_option("--seed", c.seed, "Shuffle seed")->capture_default_str();
  app.add_flag("--header", header, "Print the CSV header line first");
  CLI11_PARSE(app, argc, argv);

  std::string error;
  if (!fanstore::bench::ReadFileList(list, root, c.samples, error)) {
    std::fprintf(stderr, "fanstore-dlio: %s\n", error.c_str());
    return 2;
  }
  auto r = fanstore::bench::RunDlio(c);
  if (!r.error.empty()) {
    std::fprintf(stderr, "fanstore-dlio: %s\n", r.error.c_str());
    return 1;
  }
  double au = r.seconds > 0 ? 100.0 * r.compute_seconds / r.seconds : 0.0;
  if (header) std::printf("label,samples,batches,seconds,samples_per_s,mib_per_s,au_percent\n");
  std::printf("%s,%llu,%llu,%.4f,%.2f,%.2f,%.2f\n", label.c_str(), static_cast<unsigned long long>(r.samples),
              static_cast<unsigned long long>(r.batches), r.seconds, static_cast<double>(r.samples) / r.seconds,
              static_cast<double>(r.bytes) / r.seconds / (1024.0 * 1024.0), au);
  return 0;
}
