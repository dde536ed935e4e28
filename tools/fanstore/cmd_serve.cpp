// `fanstore serve` (the per-node MPI daemon) and `fanstore wait SOCKET` (block until a daemon is ready).
#include <memory>
#include <string>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/path_template.hpp"
#ifdef FANSTORE_WITH_MPI
#include "fanstore/serve.hpp"
#endif

namespace fanstore::cli {

void AddServeCommands(CLI::App& app, int& exit_code) {
#ifdef FANSTORE_WITH_MPI
  auto so = std::make_shared<daemon::ServeOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve", "Per-node MPI daemon: stage this rank's partitions to local storage, then serve the node's clients "
               "(run one rank per node under mpirun/srun)");
  serve->add_option("--image", so->image, "Image directory on the shared file system")->required();
  serve->add_option("--local", so->local, "Node-local staging directory ({rank} expands to the MPI rank, {node} to Slurm's node name, else the host name)")->required();
  serve->add_option("--socket", so->socket, "Unix socket clients connect to ({rank} and {node} expand); default <local>/fanstore.sock");
  serve->add_option("--replicas", so->replicas, "Copies of each partition, on distinct ranks")->capture_default_str();
  serve->add_option("--timeout", so->timeout_s, "Seconds after which a remote read fails with EIO")->capture_default_str();
  serve->add_flag("--cleanup", so->cleanup, "Remove the staged data when the daemon stops");
  serve->add_option("--reserve", so->reserve_bytes, "Bytes to leave free on the local file system")->capture_default_str();
  serve->add_option("--cache-bytes", so->cache_bytes,
                    "Node RAM cache of fetched remote files, shared by every client of the node (0: off)")
      ->capture_default_str();
  serve->add_option("--prefetch-window", so->prefetch_window,
                    "Bytes fetched ahead of the readers on a prefetch hint (0: half of --cache-bytes)")
      ->capture_default_str();
  serve->add_option("--socket-mode", so->socket_mode,
                    "Octal permission bits of the socket (default 0600: only this user; 0660 with --group)");
  serve->add_option("--group", so->group, "Group (name or gid) whose members may use the daemon too");
  serve->add_option("--conn-memory", so->conn_memory,
                    "Shared memory one client connection may pin (its reply area; bigger files go one at a time)")
      ->capture_default_str();
  serve->add_flag("--progress", so->progress_spin,
                  "Poll MPI without ever sleeping: lowest remote latency, but a core at 100% even when idle");
  serve->add_option("--hot-us", so->hot_us, "After activity, poll without sleeping this many microseconds")
      ->capture_default_str();
  serve->callback([so, &exit_code] { exit_code = daemon::Serve(*so); });
#else
  CLI::App* serve = app.add_subcommand("serve", "Per-node MPI daemon (this fanstore was built without MPI)");
  serve->allow_extras();
  serve->callback([&exit_code] {
    exit_code = Fail("serve", "this fanstore was built without MPI: install libopenmpi-dev and rebuild (FANSTORE_MPI=ON)");
  });
#endif

  auto socket = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(60.0);
  CLI::App* wait = app.add_subcommand("wait", "Wait until the daemon at SOCKET accepts connections (exit 0) or time out (exit 1)");
  wait->add_option("socket", *socket, "The daemon's Unix socket ({node} expands to this node's name)")->required();
  wait->add_option("--timeout", *timeout, "Seconds to wait")->capture_default_str();
  wait->callback([socket, timeout, &exit_code] {
    auto path = ExpandNodeTemplate(*socket);
    Status s = path.ok() ? WaitForDaemon(*path, static_cast<int>(*timeout * 1000)) : path.status();
    exit_code = s.ok() ? 0 : Fail("wait", s);
  });
}

}  // namespace fanstore::cli
