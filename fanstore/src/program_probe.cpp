// ELF program-header inspection, "#!" interpreter chains and execvp-style PATH resolution for ProbeProgram.
#include "fanstore/program_probe.hpp"

#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "fanstore/protocol/range_check.hpp"

namespace fanstore {
namespace {

bool PreadAll(int fd, void* buf, size_t n, off_t at) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    at += r;
  }
  return true;
}

// True when the program headers at [phoff, phoff + phnum * phentsize) name a PT_INTERP.
template <class Phdr>
bool HasInterp(int fd, uint64_t phoff, unsigned phnum, unsigned phentsize) {
  if (phentsize < sizeof(Phdr) || phnum == 0 || phnum > 4096) return false;
  if (!RangeWithin(phoff, uint64_t{phnum} * phentsize, INT64_MAX)) return false;  // a pread offset: below 2^63
  for (unsigned i = 0; i < phnum; ++i) {
    Phdr ph;
    if (!PreadAll(fd, &ph, sizeof ph, static_cast<off_t>(phoff + uint64_t{i} * phentsize))) return false;
    if (ph.p_type == PT_INTERP) return true;
  }
  return false;
}

// Privileges the exec would change (the kernel then sets AT_SECURE and the loader drops LD_PRELOAD).
const char* SecureReason(const std::string& path, const struct stat& st) {
  const bool setuid = (st.st_mode & S_ISUID) != 0, setgid = (st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP);
  if (setuid || setgid) {
    struct statvfs sv;
    if (::statvfs(path.c_str(), &sv) == 0 && (sv.f_flag & ST_NOSUID)) return nullptr;  // bits ignored there
    const uid_t new_euid = setuid ? st.st_uid : ::geteuid();
    const gid_t new_egid = setgid ? st.st_gid : ::getegid();
    if (setuid && new_euid != ::getuid()) return "set-user-ID";
    if (setgid && new_egid != ::getgid()) return "set-group-ID";
  }
  if (::getuid() != 0 && ::getxattr(path.c_str(), "security.capability", nullptr, 0) > 0) return "file capabilities";
  return nullptr;
}

// execvp's search: the first candidate that is an executable regular file.
std::string Resolve(const std::string& command, const char* search_path) {
  if (command.empty() || command.find('/') != std::string::npos) return command;
  const char* path = search_path ? search_path : ::getenv("PATH");
  std::string dirs = path ? path : "/bin:/usr/bin";
  size_t start = 0;
  for (;;) {
    size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + command;
    struct stat st;
    if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0) return cand;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return command;
}

}  // namespace

PreloadReach ProbeElfFd(int fd, std::string* why) {
  unsigned char ident[EI_NIDENT];
  if (!PreadAll(fd, ident, sizeof ident, 0) || memcmp(ident, ELFMAG, SELFMAG) != 0) return PreloadReach::kReached;
  auto set = [&](const char* w) {
    if (why) *why = w;
  };
  if (ident[EI_CLASS] == ELFCLASS64) {
    Elf64_Ehdr eh;
    if (!PreadAll(fd, &eh, sizeof eh, 0)) return PreloadReach::kReached;
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) return PreloadReach::kReached;
#if defined(__x86_64__)
    if (eh.e_machine != EM_X86_64) {
      set("an ELF program for another machine");
      return PreloadReach::kForeign;
    }
#endif
    if (!HasInterp<Elf64_Phdr>(fd, eh.e_phoff, eh.e_phnum, eh.e_phentsize)) {
      set("statically linked");
      return PreloadReach::kStatic;
    }
    return PreloadReach::kReached;
  }
  if (ident[EI_CLASS] == ELFCLASS32) {
    Elf32_Ehdr eh;
    if (!PreadAll(fd, &eh, sizeof eh, 0)) return PreloadReach::kReached;
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) return PreloadReach::kReached;
    if (!HasInterp<Elf32_Phdr>(fd, eh.e_phoff, eh.e_phnum, eh.e_phentsize)) {
      set("statically linked");
      return PreloadReach::kStatic;
    }
    set("a 32-bit program");
    return PreloadReach::kForeign;
  }
  return PreloadReach::kReached;
}

ProgramProbe ProbeProgram(const std::string& command, const char* search_path) {
  ProgramProbe out;
  std::string file = Resolve(command, search_path);
  for (int depth = 0; depth < 5; ++depth) {
    out.program = file;
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return out;
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return out;
    }
    if (const char* w = SecureReason(file, st)) {
      ::close(fd);
      out.reach = PreloadReach::kSecure;
      out.why = w;
      return out;
    }
    char head[256];
    ssize_t n = ::pread(fd, head, sizeof head - 1, 0);
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
      ::close(fd);
      // "#!interpreter [arg]": the kernel runs the interpreter, which is what LD_PRELOAD must reach.
      head[n] = '\0';
      char* p = head + 2;
      while (*p == ' ' || *p == '\t') ++p;
      char* e = p;
      while (*e && *e != ' ' && *e != '\t' && *e != '\n') ++e;
      if (e == p) return out;
      file.assign(p, static_cast<size_t>(e - p));
      continue;
    }
    out.reach = ProbeElfFd(fd, &out.why);
    ::close(fd);
    return out;
  }
  return out;
}

bool FuseWouldDropPrivileges(const ProgramProbe& p) { return p.reach == PreloadReach::kSecure && ::geteuid() != 0; }

std::string PrivilegedWithoutImage(const ProgramProbe& p, const std::string& mount) {
  return p.program + " runs with " + p.why + ": it keeps its privileges and runs without the image under " + mount +
         " (the loader ignores LD_PRELOAD for it, and a FUSE mount in a user namespace would drop them); if it must "
         "read the image, mount it with `fanstore mount` or run the job as root";
}

}  // namespace fanstore
