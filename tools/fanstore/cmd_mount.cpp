// `fanstore mount`: serve an image read-only through FUSE, for programs LD_PRELOAD cannot reach.
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fuse_mount.hpp"

namespace fanstore::cli {

void AddMountCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<mount::MountOptions>();
  auto raw_o = std::make_shared<std::vector<std::string>>();
  auto cache_mib = std::make_shared<uint64_t>(opts->cache_bytes >> 20);
  CLI::App* cmd = app.add_subcommand("mount",
                                     "Mount an image read-only through FUSE (for static binaries, Go, raw syscalls); "
                                     "unmount with `fusermount3 -u MOUNTPOINT`");
  cmd->add_option("-i,--image", opts->image,
                  "image directory made by `fanstore pack`; required unless --daemon names it")
      ->type_name("IMAGE");
  cmd->add_option("MOUNTPOINT", opts->mountpoint, "an existing, empty directory to mount at")->required();
  cmd->add_flag("-f,--foreground", opts->foreground,
                "stay attached; SIGINT/SIGTERM/SIGHUP unmount and exit 0 (otherwise: detach once mounted)");
  cmd->add_option("--daemon", opts->daemon_socket,
                  "multi-node: this node's `fanstore serve` socket, which names the image; {node} expands to this "
                  "node's name")
      ->type_name("SOCKET");
  cmd->add_option("-o", *raw_o,
                  "repeatable mount options, comma separated: nonempty, allow_other, clone_fd, debug, "
                  "readdirplus=yes|no|auto, max_readahead=N, and other libfuse options")
      ->type_name("OPTS")
      ->allow_extra_args(false);  // one value per -o, so `-o ro MOUNTPOINT` leaves the mount point alone
  cmd->add_option("--threads", opts->threads, "most FUSE worker threads (0: libfuse's default)")
      ->type_name("N")
      ->capture_default_str()
      ->check(InRange(0, 100000, "use 0 for libfuse's default, or a thread count"));
  cmd->add_option("--cache-mib", *cache_mib, "the server's decoded-chunk cache budget, in MiB")
      ->type_name("N")
      ->capture_default_str()
      ->check(InRange(0, 16l << 20, "give a budget in MiB, 0 for none, at most 16 TiB"));
  // Testing aid: the device checked before mounting (libfuse itself always uses /dev/fuse).
  cmd->add_option("--fuse-device", opts->fuse_device, "FUSE device to check before mounting")
      ->capture_default_str()
      ->group("");
  cmd->callback([opts, raw_o, cache_mib, &exit_code] {
    for (const std::string& item : *raw_o) {
      std::stringstream ss(item);
      std::string o;
      while (std::getline(ss, o, ',')) opts->fuse_options.push_back(o);
    }
    opts->cache_bytes = *cache_mib << 20;
    const Status s = mount::Mount(*opts);
    exit_code = s.ok() ? 0 : Fail("mount", s);
  });
}

}  // namespace fanstore::cli
