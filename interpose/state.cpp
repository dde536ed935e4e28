// Start-up (constructor), the Client, fork hooks and the exit-time stats line.
#include "state.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "ancestors.hpp"
#include "child_env.hpp"
#include "cwd.hpp"
#include "dir_registry.hpp"
#include "fanstore/env.hpp"
#include "fanstore/path.hpp"
#include "fd_table.hpp"
#include "lazy.hpp"
#include "mirror.hpp"
#include "parent_listing.hpp"
#include "trace.hpp"

namespace fanstore::interpose {

thread_local bool t_inside __attribute__((tls_model("initial-exec"))) = false;
std::atomic<int> g_mode{static_cast<int>(Mode::kOff)};
Client* g_client = nullptr;
bool g_has_links = false;
char g_mount[PATH_MAX] = "/fanstore";
size_t g_mount_len = 9;
char g_mirror[PATH_MAX] = "";
size_t g_mirror_len = 0;
bool g_log_debug = false;

namespace {

bool g_stats = false;
// A private copy of stderr for the exit-time stats line: programs such as coreutils close fd 2 in their
// own atexit handler, which runs before ours. Marked internal so close_range/closefrom spare it.
int g_stats_fd = -1;

std::atomic<bool> g_stats_printed{false};

void PrintStats() {
  if (g_client == nullptr || !g_stats || g_stats_printed.exchange(true)) return;
  ReentrancyGuard guard;
  std::string line = g_client->stats().Line() + "\n";
  if (write(2, line.data(), line.size()) < 0 && errno == EBADF && g_stats_fd >= 0) {
    ssize_t w = write(g_stats_fd, line.data(), line.size());
    (void)w;
  }
}

// No lock of ours (nor the Client's cache lock) may be held by another thread across fork, or the
// child (a DataLoader worker) would deadlock on its first open.
void ForkPrepare() {
  lazy::LockForFork();  // first: it may still need the Client (materializing lazy fds)
  ReentrancyGuard guard;
  cwd::LockForFork();
  dirs::LockForFork();
  parent_listing::LockForFork();
  if (g_client) g_client->AtForkPrepare();
}
void ForkParent() {
  ReentrancyGuard guard;
  if (g_client) g_client->AtForkParent();
  parent_listing::UnlockForFork();
  dirs::UnlockForFork();
  cwd::UnlockForFork();
  lazy::UnlockForFork(false);
}
void ForkChild() {
  ReentrancyGuard guard;
  if (g_client) g_client->AtForkChild();
  parent_listing::UnlockForFork();
  dirs::UnlockForFork();
  cwd::UnlockForFork();
  lazy::UnlockForFork(true);
}

// A job that switched users after `fanstore run` (a root entrypoint's setpriv, runuser, gosu) cannot use the node
// chunk cache, which is private to the user who started the run: Client::Create said so (once, in the first process
// of the new user) and decodes per process. Its exec'd successors and children skip the cache without a word, and
// the audit module copies libraries into this user's own directory (mirror.hpp).
void ForgetForeignNodeCache() {
  const char* node = getenv(env::kNodeCacheDir);
  struct stat st;
  if (node == nullptr || *node == '\0' || lstat(node, &st) != 0 || st.st_uid == geteuid()) return;
  setenv(env::kNodeCacheDir, "", 1);
  SetStartedVariable(env::kNodeCacheDir, "");
}

void InitOnce() {
  ReentrancyGuard guard;
  // The fanstore CLI itself (`fanstore run` inside a job already under the preload) must see the real
  // file system: it mounts FUSE at the prefix. Its main.cpp exports this marker.
  if (dlsym(RTLD_DEFAULT, "fanstore_cli_no_preload") != nullptr) return;
  const char* image = getenv(env::kImage);
  const char* daemon = getenv(env::kDaemon);
  if ((image == nullptr || *image == '\0') && (daemon == nullptr || *daemon == '\0')) return;  // stay kOff

  const char* log = getenv(env::kLog);
  g_log_debug = log != nullptr && strcmp(log, "debug") == 0;
  const char* stats = getenv(env::kStats);
  g_stats = stats != nullptr && strcmp(stats, "1") == 0;

  const char* mount = getenv(env::kMount);
  std::string m = NormalizeAbsolute((mount && *mount == '/') ? mount : env::kDefaultMount);
  if (m.size() >= sizeof g_mount) m = env::kDefaultMount;
  memcpy(g_mount, m.c_str(), m.size() + 1);
  g_mount_len = m.size();
  ancestors::Init();

  cwd::Init();
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);

  try {
    auto c = Client::FromEnv();
    if (!c.ok()) {
      // Documented choice: the program still runs (its exit code is its own), but every path under
      // the mount fails with EIO, so a job never silently reads nothing.
      // FANSTORE_DAEMON wins over FANSTORE_IMAGE (Client::FromEnv): name what was tried.
      if (daemon != nullptr && *daemon != '\0')
        WriteLine("fanstore: cannot open the image through the daemon at ", daemon, ": ", c.status().ToString());
      else WriteLine("fanstore: cannot open image ", image, ": ", c.status().ToString());
      g_mode.store(static_cast<int>(Mode::kBroken), std::memory_order_release);
      return;
    }
    g_client = c->release();  // never deleted: atexit handlers and other destructors may still call us
    ForgetForeignNodeCache();
    g_has_links = g_client->image().Summary().links > 0;
    // Cached memfds are ours: the program's close loops (closefrom, close_range) must spare them.
    g_client->SetInternalFdHook(&FdTable::MarkInternal);
    // The client's worker threads run only its code: their close of a memfd or socket of ours must not be refused
    // as a program's close of an fd it never opened (they leaked one per daemon reply area, connection or payload).
    g_client->SetWorkerThreadHook([] { t_inside = true; });
    // Known before any exec (a forked child must not allocate to classify its exec's path).
    if (std::string w = NormalizeAbsolute(mirror::Where(g_client->image())); w.size() < sizeof g_mirror) {
      memcpy(g_mirror, w.c_str(), w.size() + 1);
      g_mirror_len = w.size();
    }
  } catch (...) {
    WriteLine("fanstore: cannot open image ", image ? image : "(none)", ": out of memory");
    g_mode.store(static_cast<int>(Mode::kBroken), std::memory_order_release);
    return;
  }
  // FANSTORE_LAZY=0 (or no placeholder): every open of a file makes its kernel fd at once. With lazy fds
  // one is made only when a file is materialized.
  lazy::Init();
  if (g_stats) {
    g_stats_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    FdTable::MarkInternal(g_stats_fd);
    atexit(PrintStats);
  }
  g_mode.store(static_cast<int>(Mode::kReady), std::memory_order_release);
}

std::once_flag g_init_once;

// Runs when the dynamic loader initialises the preload library, before the program's own constructors
// and main. Until it finishes, g_mode is kOff and every wrapper passes through.
__attribute__((constructor)) void Constructor(int, char**, char** envp) {
  cwd::SetStartEnvironment(envp);
  EnsureInit();
}

}  // namespace

void EnsureInit() {
  int saved = errno;
  std::call_once(g_init_once, InitOnce);
  errno = saved;
}

void PrintStatsBeforeExit() { PrintStats(); }

}  // namespace fanstore::interpose
