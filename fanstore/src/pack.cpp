// Pack: walk the source, balance files over partitions, compress chunks in parallel, write partitions then the index.
#include "fanstore/pack.hpp"

#include <dirent.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <queue>
#include <string_view>
#include <thread>

#include "fanstore/protocol/image_format.hpp"
#include "fanstore/status.hpp"
#include "pack_tree.hpp"
#include "pack_writer.hpp"

namespace fanstore {
namespace {

using Clock = std::chrono::steady_clock;

// The folder holding `path` ("." for a bare name, "/" at the root), and `name` under a folder with one slash.
std::string ParentOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
std::string NameOf(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }  // npos + 1 == 0
std::string Join(const std::string& dir, std::string_view name) {
  return dir + (dir.back() == '/' ? "" : "/") + std::string(name);
}

// Names the temporary directories (OUTPUT.tmp-PID) earlier packs into `output` left: a pack removes its own on
// any failure or signal, so one left means that pack was killed, or runs still (here, or on another node).
void NameLeftovers(const std::string& output, const std::function<void(const std::string&)>& warn) {
  if (!warn) return;
  const std::string dir = ParentOf(output), prefix = NameOf(output) + ".tmp-", mine = std::to_string(::getpid());
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() <= prefix.size() || n.substr(0, prefix.size()) != prefix) continue;
    std::string_view pid = n.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string_view::npos || pid == mine) continue;
    const std::string path = Printable(output.find('/') == std::string::npos ? std::string(n) : Join(dir, n));
    const bool live = ::kill(static_cast<pid_t>(std::stoll(std::string(pid))), 0) == 0 || errno == EPERM;
    warn(path + (live ? " belongs to a pack (pid " + std::string(pid) +
                            ") still running on this host, or to one on "
                            "another host; once none runs, remove it: rm -r " +
                            path
                      : " is left from a pack that was killed (pid " + std::string(pid) +
                            " is not running on this host);"
                            " unless another host's pack writes it, remove it: rm -r " +
                            path));
  }
  ::closedir(d);
}

// Output must be absent or an empty directory, and must be neither the source nor inside it (it would pack
// itself, or become the image in place of the source).
Status CheckOutput(const std::string& source, const std::string& output) {
  struct stat st;
  const bool exists = ::lstat(output.c_str(), &st) == 0;
  if (exists) {
    // The image takes the output's name by rename(2), which replaces a link, never what it points to.
    if (S_ISLNK(st.st_mode))
      return Status(Code::kExists, "output " + Printable(output) +
                                       " is a symlink: give the directory it points to, or a name that does not exist");
    bool empty_dir = false;
    if (S_ISDIR(st.st_mode)) {
      empty_dir = true;
      if (DIR* d = ::opendir(output.c_str())) {
        while (dirent* e = ::readdir(d)) {
          std::string n = e->d_name;
          if (n != "." && n != "..") empty_dir = false;
        }
        ::closedir(d);
      }
    }
    if (!S_ISDIR(st.st_mode))
      return Status(Code::kExists, "output " + Printable(output) +
                                       " already exists and is not a directory: remove it or choose another -o");
    if (!empty_dir)
      return Status(Code::kExists,
                    "output " + Printable(output) + " already exists and is not empty: remove it or choose another -o");
  }
  const std::string parent = ParentOf(output);
  // The image is renamed onto the output at the end, which a mount point refuses (EBUSY): say so before any work.
  struct stat pst;
  if (exists && ::stat(parent.c_str(), &pst) == 0 && pst.st_dev != st.st_dev)
    return Status(Code::kInvalidArgument, "output " + Printable(output) +
                                              " is a mount point, which the finished image cannot replace: give a "
                                              "new directory inside it (-o " +
                                              Printable(Join(output, "image")) + ")");
  char rp_parent[PATH_MAX], rp_source[PATH_MAX];
  if (::realpath(parent.c_str(), rp_parent) == nullptr) {
    Status e = Status::FromErrno(errno, "cannot use output directory " + Printable(parent));
    return Status(e.code(), e.message() + " (create it first)");
  }
  if (::realpath(source.c_str(), rp_source) != nullptr) {
    // The output resolved when it exists (an empty directory, perhaps the source itself), else its resolved
    // parent plus its name.
    char rp_output[PATH_MAX];
    const std::string o = Join(::realpath(output.c_str(), rp_output) ? rp_output : Join(rp_parent, NameOf(output)), "");
    const std::string s = Join(rp_source, "");
    if (o.compare(0, s.size(), s) == 0)
      return Status(Code::kInvalidArgument, "output " + Printable(output) + " is the source " + Printable(source) +
                                                " or inside it: choose an -o outside it");
  }
  return Status::Ok();
}

// No FNM_PATHNAME: '*' also matches '/', so "val/*" covers every file below val/.
bool GlobMatches(const std::string& glob, const std::string& path) {
  return ::fnmatch(glob.c_str(), path.c_str(), 0) == 0;
}

bool Replicated(std::string_view path, const std::vector<std::string>& globs) {
  if (globs.empty()) return false;
  std::string p(path);
  for (const auto& g : globs)
    if (GlobMatches(g, p)) return true;
  return false;
}

// Greedy largest-first into the least-loaded partition; ties go to the lower id (deterministic).
void AssignPartitions(PackTree* tree, const PackOptions& opts, uint32_t rep_part) {
  // A hard-linked file is replicated when any of its names matches: its bytes are stored once, under its first name.
  std::vector<bool> rep(tree->nodes.size(), false);
  for (uint32_t id = 0; id < tree->nodes.size() && !opts.replicate.empty(); ++id) {
    const PackNode& n = tree->nodes[id];
    if ((n.mode & S_IFMT) == S_IFREG && Replicated(tree->Path(n), opts.replicate))
      rep[n.is_alias() ? n.link_of : id] = true;
  }
  std::vector<uint32_t> files;
  for (uint32_t id = 0; id < tree->nodes.size(); ++id) {
    PackNode& n = tree->nodes[id];
    if ((n.mode & S_IFMT) != S_IFREG || n.is_alias()) continue;  // a hard link's bytes are its first name's
    if (rep[id]) n.part = rep_part;
    else files.push_back(id);
  }
  std::sort(files.begin(), files.end(), [&](uint32_t a, uint32_t b) {
    uint64_t sa = tree->nodes[a].size, sb = tree->nodes[b].size;
    return sa != sb ? sa > sb : a < b;
  });
  using Load = std::pair<uint64_t, uint32_t>;  // (bytes, partition id)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (uint32_t p = 0; p < opts.parts; ++p) heap.push({0, p});
  for (uint32_t id : files) {
    Load l = heap.top();
    heap.pop();
    tree->nodes[id].part = l.second;
    l.first += tree->nodes[id].size;
    heap.push(l);
  }
}

std::string PartHeader(uint32_t part_id, uint64_t image_id, uint64_t data_size) {
  using namespace format;
  std::string h(kPartHeaderSize, '\0');
  std::memcpy(h.data() + phdr::kMagic, kPartMagic, sizeof kPartMagic);
  Store32(h.data() + phdr::kVersion, kPartVersion);
  Store32(h.data() + phdr::kHeaderSize, kPartHeaderSize);
  Store32(h.data() + phdr::kPartId, part_id);
  Store64(h.data() + phdr::kImageId, image_id);
  Store64(h.data() + phdr::kDataSize, data_size);
  Store64(h.data() + phdr::kHeaderXxh3, XXH3_64bits(h.data(), phdr::kHeaderXxh3));
  return h;
}

// Everything after the checks, writing into `tmp`; the caller removes `tmp` on failure.
Status PackInto(const PackOptions& opts, int threads, const std::string& tmp, WriteEnv* env, PackTree* tree,
                PackSource* source, const std::function<void(const PackProgress&)>& progress, bool assign,
                IndexMeta* meta) {
  bool any_rep = false;
  if (assign) AssignPartitions(tree, opts, opts.parts);
  for (const PackNode& n : tree->nodes) any_rep |= n.part == opts.parts;
  const uint32_t nparts = opts.parts + (any_rep ? 1 : 0);
  meta->regular_parts = opts.parts;
  meta->replicated_part = any_rep ? opts.parts : kNoPartition;
  meta->chunk_shift = static_cast<uint32_t>(std::countr_zero(opts.chunk_size));

  std::vector<std::unique_ptr<WritableFile>> files;
  const std::string placeholder(format::kPartHeaderSize, '\0');
  for (uint32_t p = 0; p < nparts; ++p) {
    meta->parts.push_back({format::PartitionFileName(p, opts.parts), 0, 0});
    auto f = env->NewWritableFile(tmp + "/" + meta->parts.back().file_name);
    if (!f.ok()) return f.status();
    Status s = (*f)->Append(placeholder.data(), placeholder.size());
    if (!s.ok()) return s;
    files.push_back(std::move(*f));
  }

  std::vector<uint32_t> tasks;  // (partition, id) order: each partition is written front to back
  for (uint32_t id = 0; id < tree->nodes.size(); ++id)
    if (tree->nodes[id].part != kNoPartition) tasks.push_back(id);
  std::stable_sort(tasks.begin(), tasks.end(),
                   [&](uint32_t a, uint32_t b) { return tree->nodes[a].part < tree->nodes[b].part; });
  Status s = WriteChunks(tasks, tree, source, opts.level, meta->chunk_shift, threads, &files, progress, opts.stop);
  if (!s.ok()) return s;

  // The other names of a hard-linked file point at the bytes stored for the first.
  for (PackNode& n : tree->nodes) {
    if (!n.is_alias()) continue;
    const PackNode& first = tree->nodes[n.link_of];
    n.part = first.part;
    n.codec = first.codec;
    n.offset = first.offset;
    n.stored_size = first.stored_size;
    n.checksum = first.checksum;
    n.chunk_first = first.chunk_first;
    n.size = first.size;
  }
  for (uint32_t id : tasks) {
    const PackNode& n = tree->nodes[id];
    meta->parts[n.part].stored_bytes += n.stored_size;
    meta->parts[n.part].files += 1;
    meta->bytes_in += n.size;
    meta->bytes_stored += n.stored_size;
  }
  const uint64_t image_id = ComputeImageId(*tree, *meta);
  for (uint32_t p = 0; p < nparts; ++p) {
    std::string h = PartHeader(p, image_id, files[p]->Size() - format::kPartHeaderSize);
    if (!(s = files[p]->WriteAt(0, h.data(), h.size())).ok()) return s;
    if (!(s = files[p]->Sync()).ok()) return s;
    if (!(s = files[p]->Close()).ok()) return s;
  }
  // The index goes last: an image without a complete index is never mistaken for a valid one.
  auto idx = env->NewWritableFile(tmp + "/" + format::kIndexName);
  if (!idx.ok()) return idx.status();
  if (!(s = WriteIndex(*tree, *meta, image_id, idx->get())).ok()) return s;
  if (!(s = (*idx)->Sync()).ok()) return s;
  if (!(s = (*idx)->Close()).ok()) return s;
  return env->SyncDir(tmp);
}

// Adds what the user can do about a failure to the status message.
Status WithAdvice(const Status& s, const std::string& output) {
  switch (s.code()) {
    case Code::kNoSpace:
      return Status(s.code(),
                    s.message() + ": free space on the file system of " + Printable(output) + " or choose another -o");
    case Code::kPermission:
      return Status(s.code(), s.message() + ": check the permissions of the source and of the output's parent");
    case Code::kNameTooLong: return Status(s.code(), s.message() + ": shorten the source path or the names inside it");
    case Code::kReadOnly:
      return Status(s.code(), s.message() + ": choose an -o on a file system this process can write to");
    default: return s;
  }
}

// Option checks shared by pack and convert; normalises trailing slashes.
Status CheckOptions(PackOptions* opts) {
  while (opts->output.size() > 1 && opts->output.back() == '/') opts->output.pop_back();
  while (opts->source.size() > 1 && opts->source.back() == '/') opts->source.pop_back();
  if (opts->source.empty()) return Status(Code::kInvalidArgument, "no source directory given");
  if (opts->output.empty()) return Status(Code::kInvalidArgument, "no output given: use -o IMAGE");
  if (opts->parts < 1 || opts->parts > 100000)
    return Status(Code::kInvalidArgument, "--parts must be between 1 and 100000, got " + std::to_string(opts->parts));
  if (opts->level < 0 || opts->level > ZSTD_maxCLevel())
    return Status(Code::kInvalidArgument, "--level must be between 0 (store raw) and " +
                                              std::to_string(ZSTD_maxCLevel()) + ", got " +
                                              std::to_string(opts->level));
  const uint32_t c = opts->chunk_size;
  if (!std::has_single_bit(c) || c < (1u << format::kMinChunkShift) || c > (1u << format::kMaxChunkShift))
    return Status(Code::kInvalidArgument,
                  "--chunk must be a power of two between 64K and 64M, got " + std::to_string(c));
  return Status::Ok();
}

}  // namespace

Status Interrupted() { return Status(Code::kIoError, "interrupted"); }

Result<PackReport> WriteImage(const PackOptions& opts, PackTree* tree, PackSource* source, WriteEnv* env,
                              const std::function<void(const PackProgress&)>& progress, bool assign_partitions) {
  const int threads =
      opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string tmp = opts.output + ".tmp-" + std::to_string(::getpid());
  Status s = env->CreateDir(tmp);
  if (!s.ok()) return WithAdvice(s, opts.output);
  IndexMeta meta;
  s = PackInto(opts, threads, tmp, env, tree, source, progress, assign_partitions, &meta);
  if (s.ok()) s = env->Rename(tmp, opts.output);
  if (!s.ok()) {
    env->RemoveDirAndFiles(tmp);
    return WithAdvice(s, opts.output);
  }
  (void)env->SyncDir(ParentOf(opts.output));  // the image is complete either way; this only hardens the rename
  PackReport rep;
  rep.files = tree->files;
  rep.dirs = tree->dirs;
  rep.links = tree->links;
  rep.skipped = tree->skipped;
  rep.bytes_in = meta.bytes_in;
  rep.bytes_stored = meta.bytes_stored;
  return rep;
}

Result<PackReport> PackWithEnv(const PackOptions& opts_in, WriteEnv* env,
                               const std::function<void(const PackProgress&)>& progress,
                               const std::function<void(const std::string&)>& warn) {
  const auto start = Clock::now();
  PackOptions opts = opts_in;
  Status s = CheckOptions(&opts);
  if (!s.ok()) return s;
  struct stat st;
  if (::stat(opts.source.c_str(), &st) != 0) {
    Status e = Status::FromErrno(errno, "cannot read source " + Printable(opts.source));
    return Status(e.code(), e.message() + " (check the path)");
  }
  if (!S_ISDIR(st.st_mode))
    return Status(Code::kNotDirectory, "source " + Printable(opts.source) + " is not a directory");
  if (!(s = CheckOutput(opts.source, opts.output)).ok()) return s;
  NameLeftovers(opts.output, warn);

  PackTree tree;
  s = WalkSource(opts, &tree, warn);
  if (!s.ok()) return WithAdvice(s, opts.output);
  // A glob that matches no file is most likely mistyped, or written from somewhere other than SRC. One pass, each
  // path made once, and done as soon as every glob has matched.
  std::vector<bool> matched(opts.replicate.size(), false);
  size_t unmatched = matched.size();
  for (uint32_t id = 0; id < tree.nodes.size() && unmatched > 0; ++id) {
    if ((tree.nodes[id].mode & S_IFMT) != S_IFREG) continue;
    const std::string path(tree.Path(tree.nodes[id]));
    for (size_t g = 0; g < matched.size(); ++g)
      if (!matched[g] && GlobMatches(opts.replicate[g], path)) matched[g] = true, --unmatched;
  }
  for (size_t g = 0; g < matched.size(); ++g)
    if (!matched[g])
      warn("--replicate " + Printable(opts.replicate[g]) +
           " matches no file, so nothing is replicated for it: a glob matches paths relative to SRC, e.g. 'val/*'");
  auto source = NewDirectorySource(opts.source);
  auto rep = WriteImage(opts, &tree, source.get(), env, progress, true);
  if (rep.ok()) rep->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

Result<PackReport> WriteImageKeepingPartitions(const PackOptions& opts_in, PackTree* tree, PackSource* source,
                                               const std::function<void(const PackProgress&)>& progress,
                                               const std::function<void(const std::string&)>& warn) {
  PackOptions opts = opts_in;
  Status s = CheckOptions(&opts);
  if (!s.ok()) return s;
  if (!(s = CheckOutput(opts.source, opts.output)).ok()) return s;
  NameLeftovers(opts.output, warn);
  return WriteImage(opts, tree, source, DefaultWriteEnv(), progress, false);
}

Result<PackReport> Pack(const PackOptions& opts, const std::function<void(const PackProgress&)>& progress,
                        const std::function<void(const std::string&)>& warn) {
  return PackWithEnv(opts, DefaultWriteEnv(), progress, warn);
}

}  // namespace fanstore
