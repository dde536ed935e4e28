// `fanstore pack SRC -o IMAGE` and `fanstore convert OLD -o NEW`: options, a progress bar on a terminal, one summary
// line; fanstore::Pack / fanstore::Convert do the work.
#include <signal.h>
#include <string.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/pack.hpp"
#include "outer_run.hpp"

namespace fanstore::cli {
namespace {

void DrawProgress(const PackProgress& p) {
  const int kWidth = 30;
  double frac = p.bytes_total
                    ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                    : (p.files_total ? static_cast<double>(p.files_done) / static_cast<double>(p.files_total) : 1.0);
  int fill = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(fill), '=');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r[%s] %3d%%  %llu/%llu files  %s/%s ", bar.c_str(), static_cast<int>(frac * 100),
               static_cast<unsigned long long>(p.files_done), static_cast<unsigned long long>(p.files_total),
               HumanBytes(p.bytes_done).c_str(), HumanBytes(p.bytes_total).c_str());
}
// SIGINT, SIGTERM and SIGHUP stop a pack: the first one asks it to stop (it removes its temporary directory
// and returns), and the signal is raised again once it has; a second one kills at once, unless it comes within a
// second of the first: `timeout` and a batch system send the same signal to the process and then to its group.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<bool> g_stop{false};
volatile sig_atomic_t g_signal = 0;
std::atomic<int64_t> g_first_signal_ns{0};  // lock-free: written and read in the handler
static_assert(std::atomic<int64_t>::is_always_lock_free);

int64_t MonotonicNs() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

void OnStopSignal(int sig) {
  if (g_signal != 0) {
    if (MonotonicNs() - g_first_signal_ns.load() < 1000000000) return;  // the same request, delivered twice
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_first_signal_ns.store(MonotonicNs());
  g_signal = sig;
  g_stop.store(true, std::memory_order_relaxed);
}

// Installs OnStopSignal, except for a signal ignored when we started (`nohup`, a shell's background job's
// SIGINT): that one stays ignored.
void CatchStopSignals() {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kStopSignals) sigaddset(&sa.sa_mask, sig);  // one handler at a time
  sa.sa_flags = SA_RESTART;
  for (int sig : kStopSignals)
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
}

// Runs pack or convert with a progress bar on a terminal and prints the one summary line; the exit code. Ended
// by a stop signal, it dies of that signal (after the cleanup), as a shell or a batch system expects.
int RunPack(PackOptions opts, bool convert) {
  // Every partition file is open while pack writes (main raised the limit to the hard one), beside the source's
  // files and a margin: say so before any work.
  rlimit rl{};
  const uint64_t need = static_cast<uint64_t>(opts.parts) + 64;
  if (!convert && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && need > rl.rlim_cur)
    return Fail("pack", "--parts " + std::to_string(opts.parts) + " needs about " + std::to_string(need) +
                            " files open at once, and this process may open " + std::to_string(rl.rlim_cur) +
                            ": raise the hard limit (ulimit -Hn), or pack with fewer --parts");
  // Under `fanstore run`, the run's mount is not there for this binary: a source in it would pack the empty
  // directory the prefix really is (or fail), and an output there would land outside the image.
  const OuterRun outer = FindOuterRun();
  for (const std::string* path : {&opts.source, &opts.output})
    if (UnderOuterMount(outer, *path))
      return Fail(convert ? "convert" : "pack",
                  Printable(*path) + " is in the mount " + outer.mount + " of the `" + outer.Words() +
                      "` this runs under, which fanstore's own commands do not see: give the directory the image was "
                      "packed from, or run fanstore outside that run");
  opts.stop = &g_stop;
  CatchStopSignals();
  const bool bar = StderrIsTerminal();
  bool drew = false;
  auto progress = [&](const PackProgress& p) {
    if (!bar) return;
    DrawProgress(p);
    drew = true;
  };
  auto warn = [&](const std::string& line) {
    std::fprintf(stderr, "%sfanstore pack: warning: %s\n", drew ? "\n" : "", line.c_str());
    drew = false;
  };
  auto r = convert ? Convert(opts, progress, warn) : Pack(opts, progress, warn);
  if (drew) std::fputc('\n', stderr);
  if (!r.ok() && g_signal != 0) {
    const int sig = g_signal;
    Fail(convert ? "convert" : "pack", std::string("stopped by SIG") + sigabbrev_np(sig) +
                                           "; the partial image was "
                                           "removed (" +
                                           Printable(opts.output) + " was not made)");
    signal(sig, SIG_DFL);
    raise(sig);
  }
  if (!r.ok()) return Fail(convert ? "convert" : "pack", r.status());
  const PackReport& rep = *r;
  double ratio = rep.bytes_stored ? static_cast<double>(rep.bytes_in) / static_cast<double>(rep.bytes_stored) : 1.0;
  std::printf("%s %llu files, %llu dirs: %s in -> %s stored (ratio %.2f) in %.1f s", convert ? "converted" : "packed",
              static_cast<unsigned long long>(rep.files), static_cast<unsigned long long>(rep.dirs),
              HumanBytes(rep.bytes_in).c_str(), HumanBytes(rep.bytes_stored).c_str(), ratio, rep.seconds);
  if (rep.links) std::printf(", %llu symlink%s", static_cast<unsigned long long>(rep.links), rep.links > 1 ? "s" : "");
  if (rep.skipped) std::printf(", skipped %llu (see warnings)", static_cast<unsigned long long>(rep.skipped));
  std::printf("\n");
  return 0;
}

void AddConvertCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<PackOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Rewrite an image made by an older fanstore (format 1) as a current one: same files, stat data and "
      "partitions; every old checksum is verified on the way");
  cmd->add_option("OLD", opts->source, "image directory of format 1")->required();
  cmd->add_option("-o,--output", opts->output,
                  "image directory to create; it must not exist, or be an empty directory (not a symlink to one)")
      ->type_name("IMAGE")
      ->required();
  cmd->add_option("--level", opts->level, "zstd level 1..22; 0 stores every chunk raw")
      ->type_name("L")
      ->capture_default_str()
      ->check(InRange(0, 22, "use 1-22, or 0 to store raw"));
  cmd->add_option("--threads", opts->threads, "threads compressing chunks (0: all cores)")
      ->type_name("T")
      ->capture_default_str()
      ->check(InRange(0, 1024, "use 0 for all cores, or at most 1024"));
  cmd->add_option("--chunk", opts->chunk_size, "chunk size: a power of two from 64K to 64M (K/M suffixes)")
      ->type_name("SIZE")
      ->transform(SizeValue())
      ->default_str("1M");
  cmd->callback([opts, &exit_code] { exit_code = RunPack(*opts, true); });
}
}  // namespace

void AddPackCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<PackOptions>();
  CLI::App* cmd = app.add_subcommand("pack", "Pack a directory tree into an image (index + partitions)");
  cmd->add_option("SRC", opts->source,
                  "directory to pack: files, directories and symlinks as they are (links not followed, hard links "
                  "stored once), with modes, owners and mtimes")
      ->required();
  cmd->add_option("-o,--output", opts->output,
                  "image directory to create; it must not exist, or be an empty directory (not a symlink to one), "
                  "and must be neither SRC nor inside it")
      ->type_name("IMAGE")
      ->required();
  cmd->add_option("--parts", opts->parts,
                  "number of regular partitions (1..100000), balanced by bytes: largest file first into the "
                  "least-loaded partition, ties to the lower id; in a multi-node run partition i goes to rank i mod "
                  "nranks")
      ->type_name("N")
      ->capture_default_str()
      ->check(InRange(1, 100000, "use 1-100000"));
  cmd->add_option("--level", opts->level,
                  "zstd level 1..22; 0 stores everything raw. Each chunk is kept compressed only when that saves "
                  "more than 3% (JPEGs and other compressed data end up raw); a chunk of zeros (a hole of a sparse "
                  "file) is stored as nothing, at every level")
      ->type_name("L")
      ->capture_default_str()
      ->check(InRange(0, 22, "use 1-22, or 0 to store raw"));
  cmd->add_option(
         "--replicate", opts->replicate,
         "repeatable: files whose relative path matches GLOB go to the replicated partition part-rep.fsp, "
         "which every node keeps (e.g. --replicate 'val/*' for the validation set); fnmatch(3) without "
         "FNM_PATHNAME and FNM_PERIOD, so '*' also matches '/' and leading dots; a hard-linked file goes there "
         "when any of its names matches")
      ->type_name("GLOB")
      ->default_str("none")
      ->allow_extra_args(false);  // one GLOB per --replicate: `--replicate GLOB SRC` leaves SRC alone
  cmd->add_option("--threads", opts->threads, "threads reading and compressing chunks (0: all cores)")
      ->type_name("T")
      ->capture_default_str()
      ->check(InRange(0, 1024, "use 0 for all cores, or at most 1024"));
  cmd->add_option("--chunk", opts->chunk_size,
                  "chunk size: files are cut into chunks of SIZE bytes, each compressed and checksummed on its own, "
                  "so a read decodes only the chunks it touches; a power of two from 64K to 64M (K/M suffixes). "
                  "Smaller chunks make small random reads of large files cheaper, larger ones compress a little better")
      ->type_name("SIZE")
      ->transform(SizeValue())
      ->default_str("1M");
  cmd->add_flag("--follow-symlinks", opts->follow_symlinks,
                "store what symlinks point at instead of the links: a link to a file becomes another name of it "
                "(stored once, as a hard link), a link to a directory a copy of the directory; dangling links and "
                "loops are skipped with a warning each (for datasets made of links)");
  cmd->add_flag("--strict", opts->strict,
                "refuse FIFOs, sockets and device nodes instead of skipping them with one warning line");
  cmd->callback([opts, &exit_code] { exit_code = RunPack(*opts, false); });
  AddConvertCommand(app, exit_code);
}

}  // namespace fanstore::cli
