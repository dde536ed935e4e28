// fanstore::Client: lookups, stat data, open files over verified chunks and real kernel fds for front ends.
#include "fanstore/client.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "client_core.hpp"
#include "client_file.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/node_cache.hpp"
#include "fanstore/path.hpp"
#include "owned_bytes.hpp"

namespace fanstore {

std::string ClientStats::Line() const {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "fanstore[pid %d]: opens=%llu stats=%llu readdirs=%llu missing=%llu bytes=%llu local=%llu "
      "remote=%llu remote_bytes=%llu cache_hits=%llu node_hits=%llu errors=%llu",
      static_cast<int>(getpid()), static_cast<unsigned long long>(opens.load()),
      static_cast<unsigned long long>(stats.load()), static_cast<unsigned long long>(readdirs.load()),
      static_cast<unsigned long long>(lookups_missing.load()), static_cast<unsigned long long>(bytes_read.load()),
      static_cast<unsigned long long>(local_loads.load()), static_cast<unsigned long long>(remote_loads.load()),
      static_cast<unsigned long long>(remote_bytes.load()), static_cast<unsigned long long>(cache_hits.load()),
      static_cast<unsigned long long>(node_hits.load()), static_cast<unsigned long long>(errors.load()));
  return buf;
}

void ClientStats::Reset() {
  for (std::atomic<uint64_t>* c : {&opens, &stats, &readdirs, &lookups_missing, &bytes_read, &local_loads,
                                   &remote_loads, &cache_hits, &node_hits, &remote_bytes, &errors})
    c->store(0, std::memory_order_relaxed);
}

namespace {

// The effective uid of this process's parent, from /proc (-1 when it cannot be read).
long ParentEuid() {
  char path[64], buf[4096];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(::getppid()));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* uid = std::strstr(buf, "\nUid:");
  long real = -1, effective = -1;
  if (uid == nullptr || std::sscanf(uid + 5, "%ld %ld", &real, &effective) != 2) return -1;
  return effective;
}

}  // namespace

Client::Client(ClientOptions opts, std::shared_ptr<const Image> image)
    : opts_(std::move(opts)), image_(std::move(image)) {
  // A fixed, recognisable device number per image directory so st_dev/st_ino pairs are stable.
  uint32_t h = static_cast<uint32_t>(std::hash<std::string>{}(image_->dir()));
  dev_ = makedev(0xfa5, h & 0xfffff);
  core_ = std::make_unique<detail::ClientCore>(*image_, stats_, opts_);
}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& opts) {
  if (opts.mount.empty() || opts.mount[0] != '/')
    return Status(Code::kInvalidArgument, "mount prefix '" + opts.mount + "' must be an absolute path");
  ImageOpenOptions io;
  io.partition_dir = opts.partition_dir;
  io.trust_token = opts.index_trust;
  io.index_file = opts.index_file;
  struct stat dir_st;
  const bool have_cache = !opts.node_cache_dir.empty() && ::lstat(opts.node_cache_dir.c_str(), &dir_st) == 0;
  const bool cache_is_ours = have_cache && dir_st.st_uid == ::geteuid();
  // (Through a daemon the index is the daemon's staged copy, and the trust token names it.)
  if (io.index_file.empty() && cache_is_ours && !opts.remote)
    io.index_file = IndexCopyIn(opts.node_cache_dir, opts.image);
  auto img = Image::Open(opts.image, io);
  if (!img.ok()) return img.status();
  ClientOptions o = opts;
  o.mount = NormalizeAbsolute(opts.mount);
  std::unique_ptr<Client> c(new Client(std::move(o), std::move(img).value()));
  if (have_cache && !cache_is_ours) {
    // The cache is private (0700) to the user who started `fanstore run`; a job that then switched users (a root
    // entrypoint's setpriv, runuser, gosu) decodes per process. Said by the first process of the new user only.
    if (ParentEuid() == static_cast<long>(dir_st.st_uid))
      std::fprintf(stderr,
                   "fanstore: the node chunk cache %s is uid %u's (who started fanstore run), this job now runs as "
                   "uid %u: its processes decode for themselves\n",
                   c->opts_.node_cache_dir.c_str(), static_cast<unsigned>(dir_st.st_uid),
                   static_cast<unsigned>(::geteuid()));
  } else if (!c->opts_.node_cache_dir.empty()) {
    auto node = NodeCache::Attach(c->opts_.node_cache_dir, *c->image_);
    // Without it every process decodes for itself: slower and bigger, never wrong. Say so once.
    if (node.ok()) c->core_->node = std::move(node).value();
    else
      std::fprintf(stderr, "fanstore: node chunk cache unavailable, decoding per process: %s\n",
                   node.status().ToString().c_str());
  }
  return c;
}

Result<std::unique_ptr<Client>> Client::FromEnv() {
  ClientOptions o;
  const char* image = std::getenv(env::kImage);
  const char* daemon = std::getenv(env::kDaemon);
  if (daemon && *daemon) {
    // Daemon mode wins over FANSTORE_IMAGE: the daemon names its staged index copy and the local partition
    // directory (read directly), and everything else comes through it.
    DaemonInfo info;
    auto fetcher = ConnectDaemonFetcher(daemon, &info);
    if (!fetcher.ok()) return fetcher.status();
    o.image = info.index_dir;
    o.partition_dir = info.partition_dir;
    o.remote = std::move(fetcher).value();
  } else {
    if (!image || !*image)
      return Status(Code::kInvalidArgument, std::string(env::kImage) + " (or " + env::kDaemon + ") is not set");
    o.image = image;
  }
  if (const char* m = std::getenv(env::kMount); m && *m) o.mount = m;
  if (const char* c = std::getenv(env::kCacheBytes); c && *c) {
    auto v = env::ParseByteCount(c);
    if (!v)
      return Status(Code::kInvalidArgument,
                    std::string(env::kCacheBytes) + "='" + c +
                        "' is not a byte count: give a number of bytes (0 disables the per-process cache) or unset it");
    o.cache_bytes = *v;
  }
  if (const char* d = std::getenv(env::kNodeCacheDir); d && *d) o.node_cache_dir = d;
  if (const char* t = std::getenv(env::kIndexTrust); t && *t) o.index_trust = t;
  return Create(o);
}

void Client::SetWorkerThreadHook(void (*hook)()) { core_->pool.SetThreadStartHook(hook); }

size_t Client::ReleaseKeptFds() { return core_->ReleaseKeptFds(); }

void Client::SetInternalFdHook(void (*hook)(int fd)) {
  core_->fd_hook = hook;
  if (core_->node) core_->node->SetInternalFdHook(hook);
  if (opts_.remote) opts_.remote->SetInternalFdHook(hook);
}

Result<uint32_t> Client::Lookup(std::string_view rel) {
  auto r = image_->Lookup(rel);
  if (r.ok()) return r;
  stats_.lookups_missing.fetch_add(1, std::memory_order_relaxed);
  return r.status();
}

void Client::FillStat(uint32_t id, struct stat* st) const {
  Entry e = image_->Get(id);
  stats_.stats.fetch_add(1, std::memory_order_relaxed);
  std::memset(st, 0, sizeof *st);
  st->st_dev = dev_;
  st->st_ino = e.ino;
  st->st_mode = e.mode;
  st->st_nlink = e.nlink;
  st->st_uid = e.uid != kNoOwner ? e.uid : getuid();  // a version-2 image stores no owner
  st->st_gid = e.gid != kNoOwner ? e.gid : getgid();
  st->st_size = static_cast<off_t>(std::min<uint64_t>(e.size, INT64_MAX));  // a crafted size stays positive
  st->st_blksize = 4096;
  // As a local file system with 4 KiB blocks would report it, so `du` and `ls -s` agree with the source.
  // (no rounding up: it could wrap). Version 3 keeps the source's own count (holes of a sparse file take none).
  st->st_blocks = e.blocks != kNoBlocks ? static_cast<blkcnt_t>(std::min<uint64_t>(e.blocks, INT64_MAX))
                                        : static_cast<blkcnt_t>(e.size / 4096 * 8 + (e.size % 4096 ? 8 : 0));
  st->st_mtim.tv_sec = e.mtime_sec;
  st->st_mtim.tv_nsec = e.mtime_nsec;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

Result<std::shared_ptr<OpenFile>> Client::Open(uint32_t id) {
  if (id >= image_->size()) return Status(Code::kNotFound, "no entry " + std::to_string(id) + " in the image");
  Entry e = image_->Get(id);
  if (e.is_dir()) return Status(Code::kIsDirectory, (e.path.empty() ? "/" : Printable(e.path)) + " is a directory");
  if (e.is_link()) return Status(Code::kLoop, Printable(e.path) + " is a symlink");  // as open(O_NOFOLLOW)
  stats_.opens.fetch_add(1, std::memory_order_relaxed);
  // Nothing is read here (an open of a 4 GiB file costs what a stat does): only the entry's layout is checked,
  // so an impossible one is EIO at open. A damaged chunk is EIO at the first read that touches it.
  if (Status s = image_->CheckLayout(e); !s.ok()) return core_->Report(e, s);
  return std::shared_ptr<OpenFile>(std::make_shared<detail::ClientFile>(*core_, e));
}

Result<std::shared_ptr<const FileBytes>> Client::Load(uint32_t id) {
  auto f = Open(id);
  if (!f.ok()) return f.status();
  auto b = OwnedBytes::Allocate((*f)->size());
  if (!b) return Status(Code::kNoMemory, "cannot allocate " + std::to_string((*f)->size()) + " bytes");
  auto n = (*f)->ReadAt(0, b->writable(), (*f)->size());
  if (!n.ok()) return n.status();
  return std::shared_ptr<const FileBytes>(std::move(b));
}

Result<int> Client::OpenFd(uint32_t id, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0)
    return Status(Code::kReadOnly, "the FanStore image is read-only");
  auto f = Open(id);
  if (!f.ok()) return f.status();
  return (*f)->KernelFd(flags);
}

void Client::AtForkPrepare() {
  core_->LockForFork();
  if (opts_.remote) opts_.remote->AtForkPrepare();  // after our locks: the fetch path never nests them
}
void Client::AtForkParent() {
  if (opts_.remote) opts_.remote->AtForkParent();
  core_->UnlockForFork(false);
}
void Client::AtForkChild() {
  core_->UnlockForFork(true);
  stats_.Reset();
  if (opts_.remote) opts_.remote->AfterForkChild();
}

}  // namespace fanstore
