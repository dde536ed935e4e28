// `fanstore serve` (the per-node MPI daemon), `fanstore wait SOCKET` (block until a daemon is ready) and
// `fanstore prefetch` (tell the node's daemon which files will be read, in order).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/path.hpp"
#include "fanstore/path_template.hpp"
#ifdef FANSTORE_WITH_MPI
#include "fanstore/serve.hpp"
#endif

namespace fanstore::cli {

void AddServeCommands(CLI::App& app, int& exit_code) {
#ifdef FANSTORE_WITH_MPI
  // Byte counts take a unit (--cache-bytes 4G, 512MiB; k, m, g... are powers of 1024), as the docs' examples do.
  auto so = std::make_shared<daemon::ServeOptions>();
  CLI::App* serve =
      app.add_subcommand("serve",
                         "Per-node MPI daemon: serve the node's clients while staging this rank's partitions to local "
                         "storage (run one rank per node under mpirun/srun)");
  serve->add_option("--image", so->image, "image directory on the shared file system")->type_name("IMAGE")->required();
  serve
      ->add_option("--local", so->local,
                   "node-local staging directory, locked while the daemon runs; {rank} expands to the MPI rank, "
                   "{node} to Slurm's node name, else the host name")
      ->type_name("DIR")
      ->required();
  serve
      ->add_option("--socket", so->socket,
                   "Unix socket for this node's clients, shorter than 108 bytes; {rank} and {node} expand")
      ->type_name("PATH")
      ->default_str("DIR/fanstore.sock");
  serve
      ->add_option("--replicas", so->replicas,
                   "copies of each regular partition, on K distinct ranks (capped at the rank count)")
      ->type_name("K")
      ->capture_default_str();
  serve->add_option("--timeout", so->timeout_s, "a remote read fails with EIO after this long, never hangs")
      ->type_name("SECONDS")
      ->capture_default_str();
  serve->add_flag("--cleanup", so->cleanup,
                  "remove what this daemon staged when it stops: the partitions and index it copied (not files of "
                  "the same name it did not write), and --local if it created it");
  serve->add_option("--reserve", so->reserve_bytes, "bytes to leave free on the local file system when staging")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  serve
      ->add_option("--cache-bytes", so->cache_bytes,
                   "the fetch cache: RAM for fetched remote ranges, shared by every client of the node (0: off, "
                   "and no prefetch)")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  serve
      ->add_option("--stage-bandwidth", so->stage_bandwidth,
                   "bytes per second this daemon reads from the image directory, staging and readers' misses "
                   "together (0: no cap)")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  serve
      ->add_option("--stage-readers", so->stage_readers,
                   "ranks reading the image directory at a time; rank r reads once rank r-N is done (0: all at once)")
      ->type_name("N")
      ->capture_default_str()
      ->check(InRange(0, 1 << 20, "use 0 for every rank at once, or how many ranks may read at a time"));
  serve->add_flag("--strict-staging", so->strict_staging,
                  "ready only once every rank has staged and verified everything, and every rank stops if one "
                  "fails (by default the daemons serve while staging, and a node whose staging fails reads the rest "
                  "from the image directory)");
  serve->add_flag("--cache-prefault", so->cache_prefault,
                  "fault the fetch cache's memory in at start, so that the first epoch does not pay for it; "
                  "ready waits for it (a termination signal stops it); each daemon takes at most half of the "
                  "MemAvailable it sees at start (several daemons on one host each take their half)");
  serve
      ->add_option("--prefetch-window", so->prefetch_window,
                   "bytes fetched ahead of the readers on a prefetch hint (0: half of --cache-bytes)")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  serve
      ->add_option("--prefetch-idle", so->prefetch_idle_s,
                   "seconds after which a hint stream nobody reads gives its prefetched room to streams being read")
      ->type_name("S")
      ->capture_default_str();
  serve
      ->add_option("--socket-mode", so->socket_mode,
                   "permission bits of the socket, in octal, whatever the umask (0600: only this user)")
      ->type_name("OCTAL")
      ->default_str("0600 (0660 with --group)");
  serve->add_option("--group", so->group, "group (name or gid) whose members may use the daemon too")
      ->type_name("GROUP")
      ->default_str("none");
  serve
      ->add_option("--conn-memory", so->conn_memory,
                   "shared memory one client connection may pin (its reply area; bigger files go one at a time)")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  serve->add_flag("--progress", so->progress_spin,
                  "poll MPI without ever sleeping: lowest remote latency, but a core at 100% even when idle");
  serve->add_flag("!--no-doorbell", so->doorbell,
                  "do not wake sleeping peers with a UDP datagram (they then see requests at their next look at "
                  "MPI, 0.2-2 ms later; for networks that drop UDP between nodes)");
  serve
      ->add_option("--mapped-send-min", so->mapped_send_min,
                   "send peers' ranges of at least this size straight from a read-only mapping of the staged "
                   "partition (0: never; for an MPI transport that cannot send from such memory)")
      ->type_name("BYTES")
      ->capture_default_str()
      ->transform(SizeValue());
  // For tests: replies between daemons bigger than this travel in chunks (1 GiB in production: MPI counts are ints).
  serve->add_option("--max-message", so->max_message, "Largest message between daemons (tests)")->group("");
  // For tests: staging's pieces this size (4 MiB in production), so that a small image still has many.
  serve->add_option("--stage-piece", so->piece_bytes, "Staging's piece size (tests)")
      ->group("")
      ->transform(SizeValue());
  serve->callback([so, &exit_code] { exit_code = daemon::Serve(*so); });
#else
  CLI::App* serve = app.add_subcommand("serve", "Per-node MPI daemon (this fanstore was built without MPI)");
  serve->allow_extras();
  serve->callback([&exit_code] {
    exit_code =
        Fail("serve", "this fanstore was built without MPI: install libopenmpi-dev and rebuild (FANSTORE_MPI=ON)");
  });
#endif

  auto socket = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(60.0);
  auto staged = std::make_shared<bool>(false);
  CLI::App* wait =
      app.add_subcommand("wait", "Wait until the daemon at SOCKET accepts connections (exit 0) or time out (exit 1)");
  wait->add_option("SOCKET", *socket, "the daemon's Unix socket ({node} expands to this node's name)")->required();
  // Its milliseconds go into an int: 2,000,000 s (23 days) is below 2^31 ms; NaN and minus values are refused too.
  wait->add_option("--timeout", *timeout, "seconds to wait")
      ->type_name("SECONDS")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double t = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && t >= 0 && t <= 2e6
                       ? std::string()
                       : v + " is not a number of seconds from 0 to 2000000 (23 days)";
          },
          ""));
  wait->add_flag("--staged", *staged,
                 "wait until every rank has staged its partitions too (the daemons serve before that); fail at "
                 "once if some ranks' staging failed, or if some ranks died or stopped answering before they had "
                 "(naming them)");
  wait->callback([socket, timeout, staged, &exit_code] {
    auto path = ExpandNodeTemplate(*socket);
    Status s = path.ok() ? WaitForDaemon(*path, static_cast<int>(*timeout * 1000), *staged) : path.status();
    exit_code = s.ok() ? 0 : Fail("wait", s);
  });

  struct PrefetchArgs {
    std::string daemon, list, mount;
    uint64_t stream = 0;
  };
  auto pa = std::make_shared<PrefetchArgs>();
  CLI::App* prefetch = app.add_subcommand(
      "prefetch",
      "Tell the node's daemon the files that will be read, in order: it fetches the remote ones ahead "
      "into its fetch cache (a new list replaces the previous one of the same --stream)");
  prefetch
      ->add_option("LIST", pa->list,
                   "file with one path per line ('-': standard input); absolute paths under "
                   "--mount or image-relative ones")
      ->required();
  prefetch->add_option("--daemon", pa->daemon, "the daemon's Unix socket ({node} expands)")
      ->type_name("SOCKET")
      ->default_str("$FANSTORE_DAEMON");
  prefetch->add_option("--mount", pa->mount, "mount prefix of absolute paths")
      ->type_name("PREFIX")
      ->default_str("$FANSTORE_MOUNT, else /fanstore");
  prefetch
      ->add_option("--stream", pa->stream,
                   "hint stream: one per reader (e.g. per rank); a new list replaces the "
                   "previous one of the same stream")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            errno = 0;
            const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            if (digits && (std::strtoull(v.c_str(), nullptr, 10), errno == 0)) return "";
            return "a whole number from 0 to 2^64 - 1 is needed, not " + v;
          },
          "N"));
  prefetch->callback([pa, &exit_code] {
    std::string sock = pa->daemon;
    if (sock.empty()) {
      const char* d = std::getenv(env::kDaemon);
      if (!d || !*d) {
        exit_code = Fail("prefetch", "no daemon: give --daemon SOCKET (or run under `fanstore run --daemon`)");
        return;
      }
      sock = d;
    }
    auto path = ExpandNodeTemplate(sock);
    if (!path.ok()) {
      exit_code = Fail("prefetch", path.status());
      return;
    }
    std::string mount = pa->mount;
    if (mount.empty()) {
      const char* m = std::getenv(env::kMount);
      mount = m && *m ? m : env::kDefaultMount;
    }
    if (mount.empty() || mount[0] != '/') {
      exit_code =
          Fail("prefetch", "--mount " + mount + " is not an absolute path: give the mount prefix, e.g. /fanstore");
      return;
    }
    mount = NormalizeAbsolute(mount);
    std::ifstream file;
    if (pa->list != "-") {
      struct stat st;
      if (stat(pa->list.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        exit_code = Fail("prefetch", "the list " + pa->list + " is a directory: give a file with one path per line");
        return;
      }
      file.open(pa->list);
      if (!file) {
        exit_code = Fail("prefetch", "cannot read the list " + pa->list);
        return;
      }
    }
    std::istream& in = pa->list == "-" ? std::cin : file;
    std::vector<std::string> rels;
    uint64_t outside = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      Classified c = ClassifyPath(line[0] == '/' ? line : mount + "/" + line, mount, "/");
      if (c.cls != PathClass::kOurs || c.rel.empty()) {
        ++outside;
        continue;
      }
      rels.push_back(std::move(c.rel));
    }
    auto r = SendPrefetchHint(*path, rels, pa->stream);
    if (!r.ok()) {
      exit_code = Fail("prefetch", r.status());
      return;
    }
    std::printf(
        "fanstore prefetch: %llu remote files (%.1f MiB) queued for the fetch cache, %llu on this node, "
        "%llu not files of the image (missing, directories, symlinks), %llu outside %s\n",
        static_cast<unsigned long long>(r->remote), static_cast<double>(r->remote_bytes) / (1 << 20),
        static_cast<unsigned long long>(r->local), static_cast<unsigned long long>(r->missing),
        static_cast<unsigned long long>(outside), mount.c_str());
    exit_code = 0;
  });
}

}  // namespace fanstore::cli
