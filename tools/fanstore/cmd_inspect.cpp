// `fanstore ls|cat|stat|info|verify`: read-only views of an image, each a thin call into fanstore::Image/Client.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/client.hpp"
#include "fanstore/image.hpp"
#include "fanstore/path.hpp"

namespace fanstore::cli {
namespace {

// Accepts "a/b", "/a/b", "a/b/", "." and "" alike: the image-relative form Lookup wants.
std::string ImageRel(const std::string& path) { return NormalizeAbsolute("/" + path).substr(1); }

std::string ModeString(uint32_t mode) {
  std::string s(1, S_ISDIR(mode) ? 'd' : S_ISLNK(mode) ? 'l' : '-');
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400u >> i)) ? rwx[i] : '-';
  // As ls shows them: s/S for set-user/group-ID over the owner's and group's x, t/T for sticky over others'.
  if (mode & S_ISUID) s[3] = (mode & S_IXUSR) ? 's' : 'S';
  if (mode & S_ISGID) s[6] = (mode & S_IXGRP) ? 's' : 'S';
  if (mode & S_ISVTX) s[9] = (mode & S_IXOTH) ? 't' : 'T';
  return s;
}

std::string TimeString(int64_t sec, uint32_t nsec, bool with_nsec) {
  time_t t = static_cast<time_t>(sec);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::string s = buf;
  if (with_nsec) {
    char ns[16];
    std::snprintf(ns, sizeof ns, ".%09u", nsec);
    s += ns;
  }
  return s;
}

// Seconds since the epoch with nine decimals, as GNU `stat -c %.9Y` prints them: one second and 0.123456789
// before the epoch is -1.123456789, stored as sec -2 and nsec 876543211.
std::string EpochString(int64_t sec, uint32_t nsec) {
  char buf[48];
  if (sec < 0 && nsec > 0) {
    std::snprintf(buf, sizeof buf, "-%" PRIu64 ".%09u", static_cast<uint64_t>(-(sec + 1)), 1000000000u - nsec);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRId64 ".%09u", sec, nsec);
  }
  return buf;
}

// Opens the image or prints why not; returns null on failure (exit code set).
std::shared_ptr<const Image> OpenOrFail(const std::string& cmd, const std::string& dir, int& exit_code) {
  auto img = Image::Open(dir);
  if (!img.ok()) {
    exit_code = Fail(cmd, img.status());
    return nullptr;
  }
  return *img;
}

// A client of the image (no daemon, no node cache: a command reads a file or two), or null (exit code set).
std::unique_ptr<Client> ClientOrFail(const std::string& cmd, const std::string& dir, int& exit_code) {
  ClientOptions o;
  o.image = dir;
  o.cache_bytes = 64ull << 20;
  o.report_errors = false;  // the command's own line says why
  auto client = Client::Create(o);
  if (!client.ok()) {
    exit_code = Fail(cmd, client.status());
    return nullptr;
  }
  return std::move(*client);
}

// The entry `path` names with the symlinks on the way followed, as through the mount (the last one too when
// `follow_last`: cat; not for stat, which shows the link). A trailing '/' asks for a directory, as in the kernel:
// the last link is followed, and a file is ENOTDIR.
bool ResolveOrFail(const std::string& cmd, Client& client, const std::string& path, bool follow_last, uint32_t* id,
                   int& exit_code) {
  const bool dir_only = !path.empty() && path.back() == '/';
  auto t = client.Resolve(ImageRel(path), follow_last || dir_only);
  if (!t.ok()) {
    exit_code = Fail(cmd, t.status());
    return false;
  }
  if (!t->outside.empty()) {
    exit_code =
        Fail(cmd, Status(Code::kNotFound, Printable(path) + " leads out of the image, to " + Printable(t->outside)));
    return false;
  }
  if (dir_only && !client.image().Get(t->id).is_dir()) {
    exit_code = Fail(cmd, Status(Code::kNotDirectory, Printable(path) + ": a trailing / names a directory"));
    return false;
  }
  *id = t->id;
  return true;
}

void PrintLong(const Entry& e) {
  std::printf("%s %3u %12" PRIu64 " %s %.*s\n", ModeString(e.mode).c_str(), e.nlink, e.size,
              TimeString(e.mtime_sec, e.mtime_nsec, false).c_str(), static_cast<int>(e.name.size()), e.name.data());
}

struct PathArgs {
  std::string image, path;
  bool long_format = false;
  int threads = 0;
};

void AddLs(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand("ls", "List a directory of an image (names sorted bytewise)");
  cmd->add_option("IMAGE", a->image, "Image directory")->required();
  cmd->add_option("PATH", a->path, "Path inside the image (default: the root)");
  cmd->add_flag("-l", a->long_format, "Long format: mode, links, size, mtime, name (default: off)");
  cmd->callback([a, &exit_code] {
    auto client = ClientOrFail("ls", a->image, exit_code);
    uint32_t id;
    // Like ls: a link to a directory named on the command line is listed through, unless -l (without a '/').
    const bool follow = !a->long_format || (!a->path.empty() && a->path.back() == '/');
    if (!client || !ResolveOrFail("ls", *client, a->path, follow, &id, exit_code)) return;
    const Image* img = &client->image();
    Entry e = img->Get(id);
    if (!e.is_dir()) {  // like ls: a file lists itself
      if (a->long_format) PrintLong(e);
      else std::printf("%.*s\n", static_cast<int>(e.name.size()), e.name.data());
      exit_code = 0;
      return;
    }
    for (uint32_t i = 0, n = img->ChildCount(id); i < n; ++i) {
      Entry c = img->Get(img->Child(id, i));
      if (a->long_format) PrintLong(c);
      else std::printf("%.*s\n", static_cast<int>(c.name.size()), c.name.data());
    }
    exit_code = 0;
  });
}

void AddCat(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand("cat", "Write a file of an image to stdout (checksum verified)");
  cmd->add_option("IMAGE", a->image, "Image directory")->required();
  cmd->add_option("PATH", a->path, "Path of a file inside the image")->required();
  cmd->callback([a, &exit_code] {
    // Through the client's range reads, as every front end: constant memory, chunks decoded in parallel
    // ahead of the writes, every chunk verified before a byte of it reaches stdout.
    auto client = ClientOrFail("cat", a->image, exit_code);
    uint32_t id;
    if (!client || !ResolveOrFail("cat", *client, a->path, true, &id, exit_code)) return;
    auto file = client->Open(id);
    if (!file.ok()) {
      exit_code = Fail("cat", file.status());
      return;
    }
    constexpr size_t kBlock = 1 << 20;
    std::unique_ptr<char[]> buf(new char[kBlock]);
    auto write_out = [&](size_t n) {
      for (size_t done = 0; done < n;) {
        ssize_t w = ::write(STDOUT_FILENO, buf.get() + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return Fail("cat", Status::FromErrno(errno, "write to stdout"));
        done += static_cast<size_t>(w);
      }
      return 0;
    };
    for (uint64_t at = 0; at < (*file)->size();) {
      auto n = (*file)->ReadAt(at, buf.get(), kBlock);
      if (!n.ok()) {
        // A block fails whole: the good chunks before the damaged one still go out (chunks below 1 MiB).
        const uint64_t chunk = client->image().Summary().chunk_size;
        for (uint64_t c = at; chunk > 0 && chunk < kBlock && c < at + kBlock && c < (*file)->size(); c += chunk) {
          auto m = (*file)->ReadAt(c, buf.get(), chunk);
          if (!m.ok() || write_out(*m) != 0) break;
        }
        exit_code = Fail("cat", n.status());
        return;
      }
      if ((exit_code = write_out(*n)) != 0) return;
      at += *n;
    }
    exit_code = 0;
  });
}

void AddStat(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand("stat", "Show everything the index holds about one path");
  cmd->add_option("IMAGE", a->image, "Image directory")->required();
  cmd->add_option("PATH", a->path, "Path inside the image ('' or / for the root)")->required();
  cmd->callback([a, &exit_code] {
    auto client = ClientOrFail("stat", a->image, exit_code);
    uint32_t id;
    if (!client || !ResolveOrFail("stat", *client, a->path, false, &id, exit_code)) return;
    const Image* img = &client->image();
    Entry e = img->Get(id);
    std::printf("  path: /%.*s\n", static_cast<int>(e.path.size()), e.path.data());
    std::printf("  type: %s\n", e.is_dir() ? "directory" : e.is_link() ? "symlink" : "regular file");
    std::printf("  mode: %04o (%s)\n", e.mode & 07777, ModeString(e.mode).c_str());
    std::printf("  size: %" PRIu64 "\n", e.size);
    std::printf(" mtime: %s (%s)\n", TimeString(e.mtime_sec, e.mtime_nsec, true).c_str(),
                EpochString(e.mtime_sec, e.mtime_nsec).c_str());
    std::printf(" inode: %" PRIu64 "\n", e.ino);
    std::printf(" links: %u\n", e.nlink);
    if (e.uid != kNoOwner) std::printf(" owner: %u:%u\n", e.uid, e.gid);
    std::printf("    id: %u (parent %u)\n", e.id, e.parent);
    if (e.is_dir()) {
      std::printf("  kids: %u\n", img->ChildCount(id));
    } else if (e.is_link()) {
      auto t = img->LinkTarget(e);
      std::printf("target: %s\n", t.ok() ? std::string(*t).c_str() : t.status().ToString().c_str());
    } else {
      std::string part = img->PartitionPath(e.part);
      std::printf("  part: %u (%s)\n", e.part, part.substr(part.find_last_of('/') + 1).c_str());
      if (e.codec == Codec::kChunked)
        std::printf(" codec: chunked (%" PRIu64 " chunks of %u bytes, each zstd, raw or zero)\n", img->ChunkCount(e),
                    img->ChunkSize());
      else
        std::printf(" codec: %s\n", e.codec == Codec::kZstd   ? "zstd"
                                    : e.codec == Codec::kZero ? "zero (nothing stored)"
                                                              : "raw");
      std::printf("offset: %" PRIu64 "\n", e.offset);
      std::printf("stored: %" PRIu64 "\n", e.stored_size);
      std::printf("  xxh3: %016" PRIx64 "\n", e.checksum);
    }
    exit_code = 0;
  });
}

void AddInfo(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand("info", "Summarise an image: counts, sizes, ratio, partitions");
  cmd->add_option("IMAGE", a->image, "Image directory")->required();
  cmd->callback([a, &exit_code] {
    auto img = OpenOrFail("info", a->image, exit_code);
    if (!img) return;
    ImageSummary s = img->Summary();
    double ratio = s.bytes_stored ? static_cast<double>(s.bytes_in) / static_cast<double>(s.bytes_stored) : 1.0;
    std::printf("image: %s\nformat version: %u\nimage id: %016" PRIx64 "\n", a->image.c_str(), s.version,
                img->ImageId());
    std::printf("files: %" PRIu64 ", directories: %" PRIu64 ", symlinks: %" PRIu64 "\n", s.files, s.dirs, s.links);
    std::printf("chunk size: %s (%" PRIu64 " chunks of multi-chunk files)\n", HumanBytes(s.chunk_size).c_str(),
                s.chunks);
    std::printf("bytes: %s in -> %s stored (ratio %.2f)\n", HumanBytes(s.bytes_in).c_str(),
                HumanBytes(s.bytes_stored).c_str(), ratio);
    std::printf("partitions: %u regular%s\n", s.parts, s.replicated_part != kNoPartition ? " + 1 replicated" : "");
    for (uint32_t p = 0; p < s.part_bytes.size(); ++p) {
      std::string path = img->PartitionPath(p);
      // MISSING (no such file), or why it cannot be read whole, in the words a read gives.
      std::string why;
      struct stat pst;
      if (Status ps = img->PartitionWhole(p); !ps.ok())
        why = ::lstat(path.c_str(), &pst) != 0 && errno == ENOENT ? "  MISSING" : "  BAD: " + ps.message();
      std::printf("  %-16s %12s %10" PRIu64 " files%s%s\n", path.substr(path.find_last_of('/') + 1).c_str(),
                  HumanBytes(s.part_bytes[p]).c_str(), s.part_files[p], p == s.replicated_part ? "  (replicated)" : "",
                  why.c_str());
    }
    exit_code = 0;
  });
}

void AddVerify(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "Decode every file and check its checksum; exit 0 only if all hold");
  cmd->add_option("IMAGE", a->image, "Image directory")->required();
  cmd->add_option("--threads", a->threads, "Threads (0 = all cores)")
      ->capture_default_str()
      ->check(InRange(0, 1024, "use 0 for all cores, or at most 1024"));
  cmd->callback([a, &exit_code] {
    auto img = OpenOrFail("verify", a->image, exit_code);
    if (!img) return;
    std::atomic<uint64_t> denied{0};  // of the bad ones: a permission, not the bytes, is what is wrong
    std::atomic<uint64_t> no_fds{0};  // ... or this process's open-file limit (a partition it could not open)
    const std::string emfile = std::strerror(EMFILE);
    uint64_t bad = VerifyImage(*img, a->threads, [&](const Entry& e, const Status& s) {
      if (s.code() == Code::kPermission) denied.fetch_add(1, std::memory_order_relaxed);
      if (s.message().find(emfile) != std::string::npos) no_fds.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "fanstore verify: BAD %s: %s\n", Printable(e.path).c_str(), s.ToString().c_str());
    });
    ImageSummary s = img->Summary();
    if (bad) {
      const std::string what = std::to_string(bad) + " of " + std::to_string(s.files) + " files ";
      if (no_fds == bad) {
        exit_code = Fail("verify", what +
                                       "could not be read: their partitions could not be opened within this process's "
                                       "open-file limit (listed above), which says nothing of the image: raise "
                                       "`ulimit -n`");
        return;
      }
      exit_code = Fail("verify", denied == bad ? what +
                                                     "cannot be read by this user (listed above): check the "
                                                     "permissions of the partition files named there"
                                               : what + "are damaged or unreadable (listed above): " +
                                                     (denied > 0 ? "fix the permissions named there, and " : "") +
                                                     "copy the image again or re-pack");
      return;
    }
    std::printf("verified %" PRIu64 " files (%s): all checksums match\n", s.files, HumanBytes(s.bytes_in).c_str());
    exit_code = 0;
  });
}

}  // namespace

void AddInspectCommands(CLI::App& app, int& exit_code) {
  AddLs(app, exit_code);
  AddCat(app, exit_code);
  AddStat(app, exit_code);
  AddInfo(app, exit_code);
  AddVerify(app, exit_code);
}

}  // namespace fanstore::cli
