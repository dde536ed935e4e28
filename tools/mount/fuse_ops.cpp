// The low-level FUSE operations: each kernel request becomes one fanstore::Client call, answered read-only.
#include "fuse_ops.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fanstore/path.hpp"

namespace fanstore::mount {
namespace {

// What an open file handle (fi->fh) points to: the client's open file, whose reads decode and verify only the
// chunks they touch (the kernel may send reads of one handle in parallel: OpenFile is thread-safe).
struct Handle {
  std::shared_ptr<OpenFile> file;
};

FsContext& Ctx(fuse_req_t req) { return *static_cast<FsContext*>(fuse_req_userdata(req)); }

// A nodeid the kernel got from us is always valid; the check only guards against a confused kernel
// (or a future image swap) turning into an out-of-range index.
bool ValidNode(const FsContext& ctx, fuse_ino_t node) { return node >= 1 && node - 1 < ctx.client->image().size(); }

void FillEntry(const FsContext& ctx, uint32_t id, fuse_entry_param* e) {
  std::memset(e, 0, sizeof *e);
  e->ino = NodeId(id);
  e->generation = 1;  // nodeids are never reused while mounted
  ctx.client->FillStat(id, &e->attr);
  e->attr_timeout = ctx.attr_timeout;
  e->entry_timeout = ctx.entry_timeout;
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto& ctx = *static_cast<FsContext*>(userdata);
  // libfuse derives max_pages (the largest request the kernel sends) from max_write, so a big
  // max_write is what makes 1 MiB reads possible, even though nothing is ever written.
  conn->max_write = ctx.max_io;
  conn->max_readahead = std::min<uint32_t>(conn->max_readahead, ctx.max_io);
  // The bytes never change: no need for the kernel to compare mtimes and drop cached pages.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (ctx.readdirplus && (conn->capable & FUSE_CAP_READDIRPLUS)) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    // Adaptive: plain readdir for a bare `ls`/listdir, readdirplus once the program stats the entries.
    if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO) conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
  } else {
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  }
  // User -o options (readdirplus=no, max_readahead=..., ...) come last so they win.
  if (ctx.conn_opts != nullptr) fuse_apply_conn_info_opts(ctx.conn_opts, conn);
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, parent)) return (void)fuse_reply_err(req, ESTALE);
  const Entry dir = ctx.client->image().Get(ImageId(parent));
  if (!dir.is_dir()) return (void)fuse_reply_err(req, ENOTDIR);
  if (std::strlen(name) > NAME_MAX) return (void)fuse_reply_err(req, ENAMETOOLONG);  // as ext4 says
  Result<uint32_t> id = ctx.client->Lookup(JoinRel(dir.path, name));
  if (!id.ok()) {
    if (id.status().code() == Code::kNotFound) {
      // ino 0 with a timeout is a negative entry: the kernel answers ENOENT itself next time
      // (python's import machinery probes many missing names).
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.entry_timeout = ctx.negative_timeout;
      return (void)fuse_reply_entry(req, &e);
    }
    return (void)fuse_reply_err(req, ToErrno(id.status()));
  }
  fuse_entry_param e;
  FillEntry(ctx, *id, &e);
  fuse_reply_entry(req, &e);
}

// Nodeids are image ids, fixed for the life of the mount, so there is nothing to forget.
void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
void OpForgetMulti(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, ino)) return (void)fuse_reply_err(req, ESTALE);
  struct stat st;
  ctx.client->FillStat(ImageId(ino), &st);
  ctx.client->stats().stats.fetch_add(1, std::memory_order_relaxed);
  fuse_reply_attr(req, &st, ctx.attr_timeout);
}

// The target verbatim; the kernel follows it (an absolute one leaves the mount unless it names it).
void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, ino)) return (void)fuse_reply_err(req, ESTALE);
  const Entry e = ctx.client->image().Get(ImageId(ino));
  if (!e.is_link()) return (void)fuse_reply_err(req, EINVAL);
  auto target = ctx.client->image().LinkTarget(e);
  if (!target.ok()) return (void)fuse_reply_err(req, ToErrno(target.status()));
  fuse_reply_readlink(req, std::string(*target).c_str());
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, ino)) return (void)fuse_reply_err(req, ESTALE);
  // The mount is "ro" so the VFS already refuses these; answering EROFS here too keeps the
  // semantics if someone mounts with -o rw.
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) return (void)fuse_reply_err(req, EROFS);
  const uint32_t id = ImageId(ino);
  auto h = std::make_unique<Handle>();
  // The first chunk is verified here: a damaged small file is EIO at open, exactly as through the
  // interposer (the client has printed the one line naming the file). Opening counts in stats().opens.
  Result<std::shared_ptr<OpenFile>> file = ctx.client->Open(id);
  if (!file.ok()) return (void)fuse_reply_err(req, ToErrno(file.status()));
  h->file = std::move(*file);
  fi->fh = reinterpret_cast<uint64_t>(h.get());
  fi->keep_cache = 1;  // FOPEN_KEEP_CACHE: pages read once stay valid across opens (image is immutable)
  fi->noflush = 1;     // nothing to flush on close: saves a round-trip per close
  if (fuse_reply_open(req, fi) == 0) h.release();  // on failure (interrupted) release will never come
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  FsContext& ctx = Ctx(req);
  // Our own reference: once we reply, the kernel may release the handle (and with it the handle's reference)
  // while this call is still on its way out.
  const std::shared_ptr<OpenFile> file = reinterpret_cast<Handle*>(fi->fh)->file;
  OpenFile& f = *file;
  const uint64_t at = static_cast<uint64_t>(std::max<off_t>(off, 0));
  const uint64_t chunk = ctx.client->image().ChunkSize();
  if (size > 0 && at < f.size() && at / chunk == (at + size - 1) / chunk) {
    // Within one chunk (the kernel's reads are page-aligned, at most max_io): reply straight from the
    // verified chunk, one copy into the kernel.
    bool replied = false;
    Result<size_t> r = f.Visit(at, size, [&](const char* p, size_t len) {
      fuse_reply_buf(req, p, len);
      replied = true;
      return len;
    });
    if (!r.ok()) return (void)fuse_reply_err(req, ToErrno(r.status()));
    if (!replied) fuse_reply_buf(req, nullptr, 0);
    return;
  }
  thread_local std::vector<char> buf;
  buf.resize(size);
  Result<size_t> r = f.ReadAt(at, buf.data(), size);
  if (!r.ok()) return (void)fuse_reply_err(req, ToErrno(r.status()));
  fuse_reply_buf(req, buf.data(), *r);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<Handle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, ino)) return (void)fuse_reply_err(req, ESTALE);
  if (!ctx.client->image().Get(ImageId(ino)).is_dir()) return (void)fuse_reply_err(req, ENOTDIR);
  fi->cache_readdir = 1;  // FOPEN_CACHE_DIR: the kernel keeps listings, later opendirs cost no readdir
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

// Listing offsets: 0 ".", 1 "..", then child i at 2 + i; the offset stored with an entry is the
// position of the next one, so a listing resumed at any offset continues exactly there.
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  FsContext& ctx = Ctx(req);
  if (!ValidNode(ctx, ino)) return (void)fuse_reply_err(req, ESTALE);
  const Image& img = ctx.client->image();
  const uint32_t dir_id = ImageId(ino);
  const uint64_t total = 2ull + img.ChildCount(dir_id);
  thread_local std::vector<char> buf;
  thread_local std::string name;
  buf.resize(size);
  size_t used = 0;
  for (uint64_t k = static_cast<uint64_t>(std::max<off_t>(off, 0)); k < total; ++k) {
    uint32_t id;
    if (k == 0) {
      id = dir_id, name = ".";
    } else if (k == 1) {
      id = img.Get(dir_id).parent, name = "..";
    } else {
      id = img.Child(dir_id, static_cast<uint32_t>(k - 2));
      name = img.Get(id).name;  // views are not NUL-terminated; libfuse wants a C string
    }
    size_t need;
    const off_t next = static_cast<off_t>(k + 1);
    if (plus) {
      fuse_entry_param e;
      FillEntry(ctx, id, &e);
      // "." and ".." are never linked by the kernel, so they take no lookup reference.
      if (k < 2) e.ino = 0;
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e, next);
    } else {
      struct stat st;
      std::memset(&st, 0, sizeof st);
      const Entry en = img.Get(id);
      st.st_ino = en.ino;    // d_ino: the image's stable inode, as stat reports it
      st.st_mode = en.mode;  // d_type comes from the file type bits
      need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st, next);
    }
    if (need > size - used) break;  // full: the kernel asks again from `k`
    used += need;
  }
  ctx.client->stats().readdirs.fetch_add(1, std::memory_order_relaxed);
  fuse_reply_buf(req, buf.data(), used);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDir(req, ino, size, off, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDir(req, ino, size, off, true);
}
void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  const FsContext& ctx = Ctx(req);
  struct statvfs sv;
  std::memset(&sv, 0, sizeof sv);
  sv.f_bsize = 4096;
  sv.f_frsize = 4096;
  sv.f_blocks = (ctx.total_bytes + 4095) / 4096;  // decoded size: what `du`/`df` users expect
  sv.f_bfree = sv.f_bavail = 0;                   // read-only: no room to write
  sv.f_files = ctx.total_entries;
  sv.f_ffree = sv.f_favail = 0;
  sv.f_namemax = 255;
  sv.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &sv);
}

// Images carry no extended attributes: report "no such attribute" like a plain file system would,
// rather than ENOSYS, which the kernel would turn into EOPNOTSUPP.
void OpGetxattr(fuse_req_t req, fuse_ino_t, const char*, size_t) { fuse_reply_err(req, ENODATA); }
void OpListxattr(fuse_req_t req, fuse_ino_t, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, 0);
  fuse_reply_buf(req, nullptr, 0);
}

// Every modifying operation: EROFS, the same answer the interposer gives.
void Erofs(fuse_req_t req) { fuse_reply_err(req, EROFS); }
void OpSetattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { Erofs(req); }
void OpMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Erofs(req); }
void OpMkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { Erofs(req); }
void OpUnlink(fuse_req_t req, fuse_ino_t, const char*) { Erofs(req); }
void OpSymlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { Erofs(req); }
void OpRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) { Erofs(req); }
void OpLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Erofs(req); }
void OpWrite(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) { Erofs(req); }
void OpCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { Erofs(req); }
void OpSetxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { Erofs(req); }
void OpRemovexattr(fuse_req_t req, fuse_ino_t, const char*) { Erofs(req); }
void OpFallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { Erofs(req); }
void OpCopyFileRange(fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t, fuse_file_info*, size_t,
                     int) {
  Erofs(req);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpUnlink;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.release = OpRelease;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.statfs = OpStatfs;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.create = OpCreate;
  ops.fallocate = OpFallocate;
  ops.copy_file_range = OpCopyFileRange;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& LowLevelOps() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace fanstore::mount
