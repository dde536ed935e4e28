// Session lifetime of `fanstore mount`: pre-checks, client, libfuse session and mount, daemonizing,
// signal handling, the multithreaded loop, and a clean unmount.
#include "fuse_mount.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fanstore/client.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/path_template.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fuse_ops.hpp"
#include "fuse_preflight.hpp"

namespace fanstore::mount {
namespace {

// Until the mount is in place libfuse's messages are collected so that the caller gets them inside
// its one error line; afterwards they go to stderr (the terminal in -f, /dev/null once detached).
bool g_capture_log = true;
std::string g_captured;

void LogToCaller(enum fuse_log_level, const char* fmt, va_list ap) {
  char line[1024];
  std::vsnprintf(line, sizeof line, fmt, ap);
  if (!g_capture_log) {
    std::fputs(line, stderr);
    return;
  }
  g_captured += line;  // libfuse may write one message in pieces ("unknown option(s): `", "-o ", "bogus'\n")
}

// What libfuse said, its lines joined with "; " (without its "fuse: " prefix), or `fallback`.
std::string Captured(const char* fallback) {
  std::string out;
  size_t at = 0;
  while (at < g_captured.size()) {
    size_t end = g_captured.find('\n', at);
    if (end == std::string::npos) end = g_captured.size();
    std::string s = g_captured.substr(at, end - at);
    at = end + 1;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    if (s.rfind("fuse: ", 0) == 0) s.erase(0, 6);
    if (!s.empty()) out += (out.empty() ? "" : "; ") + s;
  }
  return out.empty() ? std::string(fallback) : out;
}

// libfuse splits -o values at ',', so a comma inside fsname (an image path) must be escaped.
std::string EscapeOptionValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string AbsolutePath(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) != nullptr) return buf;
  return p;
}

// Owns everything libfuse hands out, so every early return tears down in the right order.
struct Session {
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_conn_info_opts* conn_opts = nullptr;
  fuse_session* se = nullptr;
  bool mounted = false;
  bool signals = false;
  ~Session() {
    if (signals) fuse_remove_signal_handlers(se);
    if (mounted) fuse_session_unmount(se);
    if (se != nullptr) fuse_session_destroy(se);
    std::free(conn_opts);
    fuse_opt_free_args(&args);
  }
};

// A client on a sealed memfd copy of the image's index, which a `cp` or `rsync --inplace` over the image cannot
// change under this long-lived server; an error where no copy can be made (no memfd, no /proc).
Result<std::unique_ptr<Client>> ClientOnIndexCopy(ClientOptions o) {
  int fd = memfd_create("fanstore-index", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::FromErrno(errno, "memfd_create");
  if (Status s = CopyIndexFile(o.image + "/" + format::kIndexName, fd); !s.ok()) {
    close(fd);
    return s;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  o.index_file = "/proc/self/fd/" + std::to_string(fd);
  auto client = Client::Create(o);
  close(fd);  // the mapping keeps it
  return client;
}

}  // namespace

Status Mount(const MountOptions& opts) {
  if (opts.image.empty() && opts.daemon_socket.empty())
    return Status(Code::kInvalidArgument, "--image (or --daemon) is required");
  if (opts.threads < 0) return Status(Code::kInvalidArgument, "--threads must be >= 0");

  // Our own -o items are taken out; the rest go to libfuse, which rejects what it does not know.
  bool nonempty = false, clone_fd = false;
  std::vector<std::string> passthrough;
  for (const std::string& o : opts.fuse_options) {
    if (o.empty()) continue;
    if (o == "nonempty") nonempty = true;       // libfuse 3 no longer knows it; we implement the check ourselves
    else if (o == "clone_fd") clone_fd = true;  // a loop setting, not a mount option
    else passthrough.push_back(o);
  }

  if (Status s = CheckFuseDevice(opts.fuse_device); !s.ok()) return s;
  if (Status s = CheckMountPoint(opts.mountpoint, nonempty); !s.ok()) return s;
  const std::string mountpoint = AbsolutePath(opts.mountpoint);
  // Absolute because a detached server chdirs to "/" and may open partitions lazily.
  const std::string image = opts.image.empty() ? std::string() : AbsolutePath(opts.image);

  ClientOptions copts;
  copts.image = image;
  if (!opts.daemon_socket.empty()) {
    // Multi-node, as FANSTORE_DAEMON for the interposer: the daemon names its index copy and this node's
    // staged partitions (read directly); every other partition is fetched through it. Probing here means
    // a dead or missing daemon is reported to the caller before anything is mounted.
    // "{node}" names this node's daemon, as in `fanstore run --daemon`, so one command line serves every node.
    Result<std::string> socket = ExpandNodeTemplate(opts.daemon_socket);
    if (!socket.ok()) return socket.status();
    DaemonInfo info;
    Result<std::shared_ptr<RemoteFetcher>> fetcher = ConnectDaemonFetcher(*socket, &info);
    if (!fetcher.ok()) return fetcher.status();
    copts.image = info.index_dir;
    copts.partition_dir = info.partition_dir;
    copts.remote = std::move(fetcher).value();
  }
  copts.mount = mountpoint;
  copts.cache_bytes = opts.cache_bytes;
  // Alone, the server maps a copy of the index (ClientOnIndexCopy); where none can be made, the image's own, after
  // one warning. The daemon's index is its own staged copy already.
  const bool alone = opts.daemon_socket.empty();
  Result<std::unique_ptr<Client>> client = alone ? ClientOnIndexCopy(copts) : Client::Create(copts);
  if (!client.ok() && alone) {
    const Status no_copy = client.status();
    client = Client::Create(copts);
    if (client.ok())
      std::fprintf(stderr,
                   "%s: warning: no private copy of the index (%s); do not overwrite %s/index.fsi in "
                   "place while it is mounted\n",
                   opts.command.c_str(), no_copy.ToString().c_str(), image.c_str());
  }
  if (!client.ok()) return client.status();  // the image's own fault, in the words for it
  // Alone (no daemon to fetch through), a partition that cannot be read here gives EIO for its files, and a
  // detached server's reasons go nowhere: say it now. The other partitions' files are still served.
  if (alone) {
    const Image& img = (*client)->image();
    uint32_t bad = 0;
    Status first;
    for (uint32_t p = 0; p < img.PartitionCount(); ++p) {
      Status s = img.PartitionWhole(p);
      if (!s.ok() && bad++ == 0) first = s;
    }
    if (bad > 0)
      std::fprintf(stderr,
                   "%s: warning: %u of %u partitions cannot be read whole, so (some of) their files give EIO: %s\n",
                   opts.command.c_str(), bad, img.PartitionCount(), first.ToString().c_str());
  }

  FsContext ctx;
  ctx.client = client->get();
  const ImageSummary summary = ctx.client->image().Summary();
  ctx.total_bytes = summary.bytes_in;
  ctx.total_entries = ctx.client->image().size();

  // "ro" makes the VFS refuse writes before they reach us; default_permissions lets the kernel check
  // mode bits itself (no access() round-trips), exactly as for the image's stat data.
  std::string mount_opts = "ro,default_permissions,subtype=fanstore,fsname=" + EscapeOptionValue(copts.image);
  for (const std::string& o : passthrough) mount_opts += "," + o;
  g_capture_log = true;
  g_captured.clear();
  fuse_set_log_func(LogToCaller);

  Session s;
  fuse_opt_add_arg(&s.args, "fanstore");
  fuse_opt_add_arg(&s.args, "-o");
  fuse_opt_add_arg(&s.args, mount_opts.c_str());
  // Connection options (readdirplus=, max_readahead=, splice_*) are applied in init; parsing removes them.
  s.conn_opts = fuse_parse_conn_info_opts(&s.args);
  if (s.conn_opts == nullptr)
    return Status(Code::kInvalidArgument, "bad -o options: " + Captured("rejected by libfuse"));
  ctx.conn_opts = s.conn_opts;
  s.se = fuse_session_new(&s.args, &LowLevelOps(), sizeof(fuse_lowlevel_ops), &ctx);
  if (s.se == nullptr) return Status(Code::kInvalidArgument, "bad -o options: " + Captured("rejected by libfuse"));
  if (fuse_session_mount(s.se, mountpoint.c_str()) != 0)
    return Status(Code::kPermission, "cannot mount at " + mountpoint + ": " + Captured("mount failed"));
  s.mounted = true;
  if (fuse_set_signal_handlers(s.se) != 0)
    return Status(Code::kIoError, "cannot install signal handlers: " + Captured("sigaction failed"));
  s.signals = true;
  g_capture_log = false;

  if (!opts.foreground) {
    // Detach only now: the caller has seen every error that could happen before the mount existed.
    // The client takes no lock across the fork, and the child (which keeps serving) drops shared state.
    const pid_t caller = ::getpid();
    ctx.client->AtForkPrepare();
    const int rc = fuse_daemonize(0);
    // Only the child returns from a successful fuse_daemonize; a failed one may return in either.
    if (::getpid() == caller) ctx.client->AtForkParent();
    else ctx.client->AtForkChild();
    if (rc != 0) return Status(Code::kIoError, "cannot detach from the terminal (fork/setsid failed)");
  }

  fuse_loop_config* cfg = fuse_loop_cfg_create();
  if (opts.threads > 0) {
    fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(opts.threads));
    // Keep them all: a training job's readers come in waves, and thread churn costs more than memory.
    fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(opts.threads));
  }
  fuse_loop_cfg_set_clone_fd(cfg, clone_fd ? 1 : 0);
  const int rc = fuse_session_loop_mt(s.se, cfg);
  fuse_loop_cfg_destroy(cfg);
  if (const char* v = std::getenv(env::kStats); v != nullptr && std::string(v) == "1")
    std::fprintf(stderr, "%s\n", ctx.client->stats().Line().c_str());  // seen in -f only: detached stderr is /dev/null
  // rc > 0 is the signal (SIGINT/SIGTERM/SIGHUP) that ended the loop: a requested, clean stop.
  if (rc < 0) return Status(Code::kIoError, "FUSE session failed: " + std::string(std::strerror(-rc)));
  return Status::Ok();
}

}  // namespace fanstore::mount
