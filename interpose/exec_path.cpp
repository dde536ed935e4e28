// execvp's PATH search on our execve, and posix_spawn[p] of programs stored in the image (exec_path.hpp).
#include "exec_path.hpp"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "cwd.hpp"
#include "exec_handover.hpp"
#include "fd_table.hpp"
#include "mirror.hpp"
#include "ops.hpp"
#include "wrap.hpp"

namespace fanstore::interpose::exec_path {
namespace {

constexpr const char* kDefaultPath = "/bin:/usr/bin";  // glibc's confstr(_CS_PATH)

// glibc's maybe_script_execute: a file the kernel would not run (no "#!") is run by /bin/sh.
void ScriptExecute(const char* file, char* const argv[], char* const envp[]) {
  std::vector<char*> args;
  try {
    args.push_back(const_cast<char*>("/bin/sh"));
    args.push_back(const_cast<char*>(file));
    for (size_t i = 1; argv != nullptr && argv[0] != nullptr && argv[i] != nullptr; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
  } catch (...) {
    errno = ENOMEM;
    return;
  }
  execve(args[0], args.data(), envp);
}

// Calls f(candidate) for each PATH entry joined with `file` (an empty entry is the cwd) until it returns
// true; false when none did.
template <class F>
bool ForEachCandidate(const char* file, F&& f) {
  const char* path = getenv("PATH");
  if (path == nullptr) path = kDefaultPath;
  const size_t file_len = strlen(file);
  char buf[PATH_MAX];
  for (const char* p = path;;) {
    const char* end = strchrnul(p, ':');
    const size_t dir_len = static_cast<size_t>(end - p);
    if (dir_len + 1 + file_len < sizeof buf) {  // glibc skips entries too long for a path
      memcpy(buf, p, dir_len);
      size_t n = dir_len;
      if (n > 0) buf[n++] = '/';
      memcpy(buf + n, file, file_len + 1);
      if (f(static_cast<const char*>(buf))) return true;
    }
    if (*end == '\0') return false;
    p = end + 1;
  }
}

// Could a PATH search reach the image: some entry under the mount (or relative, with a virtual cwd or a
// real one near the mount)? Cheap for the usual PATH: one prefix compare per entry.
bool SearchReachesImage() {
  const char* path = getenv("PATH");
  if (path == nullptr) path = kDefaultPath;
  char dir[PATH_MAX];
  for (const char* p = path;;) {
    const char* end = strchrnul(p, ':');
    const size_t n = static_cast<size_t>(end - p);
    if (n == 0 || p[0] != '/') {
      if (cwd::HasVirtual() || cwd::RealCwdNearMount()) return true;
    } else if (n < sizeof dir) {
      memcpy(dir, p, n);
      dir[n] = '\0';
      if (!SafeClassify(AT_FDCWD, dir).pass()) return true;
    }
    if (*end == '\0') return false;
    p = end + 1;
  }
}

// The kernel's limit on "#!" interpreters that are scripts themselves: 5 scripts in a row run, the 6th is ELOOP
// (fs/exec.c's binfmt loop; measured, and checked by tests/integration/exec_from_image.sh).
constexpr int kMaxScriptChain = 5;
thread_local int t_script_depth __attribute__((tls_model("initial-exec"))) = 0;

// The interpreter's argv for a script: interp, [arg], path (as given to exec), argv[1..] (argv[0] is dropped).
std::vector<char*> ScriptArgv(const Shebang& sb, const char* path, char* const argv[]) {
  std::vector<char*> v;
  v.push_back(const_cast<char*>(sb.interp));
  if (sb.has_arg) v.push_back(const_cast<char*>(sb.arg));
  v.push_back(const_cast<char*>(path));
  for (size_t i = 1; argv != nullptr && argv[0] != nullptr && argv[i] != nullptr; ++i) v.push_back(argv[i]);
  v.push_back(nullptr);
  return v;
}

int SpawnFile(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
              char* const argv[], char* const envp[], int depth);

// posix_spawn of image entry `r` (looked up), named `path` by the caller. An ELF program runs from its copy
// (ExecCopy), else from a memfd of its bytes, exec'd by the path /proc/<our pid>/fd/N, which the child resolves
// in our fd table: its file actions (dup2 onto N, closefrom) cannot touch it, and the fd stays close-on-exec. A
// "#!" script is spawned as the kernel would run it: its interpreter (from the image or not) with the script's own
// path.
int SpawnEntry(pid_t* pid, const Resolved& r, const char* path, const posix_spawn_file_actions_t* fa,
               const posix_spawnattr_t* attr, char* const argv[], char* const envp[], int depth) {
  std::string why, image_path, exec_path;
  Shebang sb;
  int fd = -1;
  int err = Serve(
      [&]() -> int {
        if (g_client->image().Get(r.id).is_dir()) return EACCES;
        if (int e = AccessEntry(r.id, X_OK, true); e != 0) return e;
        fd = OpenEntry(r.id, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return errno;
        image_path = AbsoluteOf(r.rel);
        int script = ReadShebang(fd, &sb);
        if (script != 0) return script < 0 ? ENOEXEC : -2;
        if (handover::NeededForFd(fd, image_path.c_str(), &why)) return -1;
        if (!ExecCopy(r.id, fd, &exec_path))
          exec_path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
        return 0;
      },
      ENOMEM);
  int rc = err;
  if (err == -1) {
    rc = handover::Spawn(pid, image_path.c_str(), fa, attr, argv, envp, why);  // a static program: FUSE
  } else if (err == -2) {
    if (depth >= kMaxScriptChain) {
      rc = ELOOP;
    } else {
      try {
        std::vector<char*> v = ScriptArgv(sb, path, argv);
        rc = SpawnFile(pid, sb.interp, fa, attr, v.data(), envp, depth + 1);
      } catch (...) {
        rc = ENOMEM;
      }
    }
  } else if (err == 0) {
    TraceCall("posix_spawn", image_path.c_str(), 0, 0);
    rc = FS_REAL(posix_spawn, pid, exec_path.c_str(), fa, attr, argv, envp);
  }
  if (fd >= 0) {
    FdTable::Clear(fd);
    FS_REAL(close, fd);
  }
  return rc;
}

// posix_spawn of `file` (a path, no search): from the image when it is ours, otherwise libc's (after the
// hand-over check). An errno value.
int SpawnFile(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
              char* const argv[], char* const envp[], int depth) {
  Resolved r = SafeClassify(AT_FDCWD, file);
  if (r.pass()) {
    std::string why;
    if (handover::Needed(r.PassPath(file), false, &why))
      return handover::Spawn(pid, r.PassPath(file), fa, attr, argv, envp, why);
    return FS_REAL(posix_spawn, pid, r.PassPath(file), fa, attr, argv, envp);
  }
  Serve(
      [&] {
        LookUp(&r);
        return 0;
      },
      0);
  return r.kind == Resolved::kFail ? r.err : SpawnEntry(pid, r, file, fa, attr, argv, envp, depth);
}

// The $ORIGIN-relative DT_RPATH/DT_RUNPATH entries of ELF program `fd` (a 64-bit one: others are handed over), with
// "$ORIGIN"/"${ORIGIN}" left out: "/../lib" for "$ORIGIN/../lib". Empty for anything unreadable.
std::vector<std::string> OriginSearchDirs(int fd) {
  std::vector<std::string> out;
  auto read = [&](void* buf, size_t n, uint64_t at) {
    return at < INT64_MAX && FS_REAL(pread, fd, buf, n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
  };
  Elf64_Ehdr eh;
  if (!read(&eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096)
    return out;
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (ph.empty() || !read(ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) return out;
  std::vector<Elf64_Dyn> dyn;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_DYNAMIC || p.p_filesz > (1u << 20)) continue;
    dyn.resize(p.p_filesz / sizeof(Elf64_Dyn));
    if (!read(dyn.data(), dyn.size() * sizeof(Elf64_Dyn), p.p_offset)) return out;
  }
  uint64_t strtab = 0;
  bool have_strtab = false;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag != DT_STRTAB) continue;
    for (const Elf64_Phdr& p : ph)  // an address: the file offset of the PT_LOAD that holds it
      if (p.p_type == PT_LOAD && d.d_un.d_ptr >= p.p_vaddr && d.d_un.d_ptr - p.p_vaddr < p.p_filesz) {
        strtab = d.d_un.d_ptr - p.p_vaddr + p.p_offset;
        have_strtab = true;
      }
  }
  if (!have_strtab) return out;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag != DT_RPATH && d.d_tag != DT_RUNPATH) continue;
    char buf[PATH_MAX];
    ssize_t n = FS_REAL(pread, fd, buf, sizeof buf - 1, static_cast<off_t>(strtab + d.d_un.d_val));
    if (n <= 0) continue;
    buf[n] = '\0';
    std::string_view list(buf, strlen(buf));
    while (!list.empty()) {
      std::string_view e = list.substr(0, list.find(':'));
      list.remove_prefix(std::min(list.size(), e.size() + 1));
      for (std::string_view tok : {std::string_view("$ORIGIN"), std::string_view("${ORIGIN}")})
        if (e.substr(0, tok.size()) == tok && (e.size() == tok.size() || e[tok.size()] == '/'))
          out.emplace_back(e.substr(tok.size()));
    }
  }
  return out;
}

// The loader looks for the audit module's own libraries (libc.so.6 included) through the program's RUNPATH before
// la_objsearch is active, and a directory it cannot stat then is never searched again in that process. So every
// $ORIGIN-relative RPATH/RUNPATH directory of a copy that the image holds is made in the mirror before the exec.
void MakeOriginDirs(int fd, const std::string& root, const Entry& e) {
  std::string_view prog(e.path);
  const size_t slash = prog.rfind('/');
  const std::string origin(prog.substr(0, slash == std::string_view::npos ? 0 : slash));
  for (const std::string& rest : OriginSearchDirs(fd)) {
    // Lexically, as the kernel walks the mirror's path; a directory above the image's root is not ours.
    std::vector<std::string_view> parts;
    bool above = false;
    const std::string path = origin + "/" + rest;
    for (std::string_view p = path; !p.empty() && !above;) {
      std::string_view c = p.substr(0, p.find('/'));
      p.remove_prefix(std::min(p.size(), c.size() + 1));
      if (c == "..") {
        if (parts.empty()) above = true;
        else parts.pop_back();
      } else if (!c.empty() && c != ".") {
        parts.push_back(c);
      }
    }
    if (above || parts.empty()) continue;
    std::string dir;
    for (std::string_view c : parts) dir.append("/").append(c);
    auto t = g_client->Resolve(std::string_view(dir).substr(1));
    if (t.ok() && t->outside.empty() && g_client->image().Get(t->id).is_dir()) (void)mirror::MakeDirs(root + dir);
  }
}

}  // namespace

// The loader derives $ORIGIN from /proc/self/exe: from the copy, RUNPATH $ORIGIN/../lib finds the libraries next
// to it (through the audit module). The copy is made from `fd`, the file's kernel fd.
bool ExecCopy(uint32_t id, int fd, std::string* path) {
  // Asked each time: the directory depends on the effective user, which a process may change between execs.
  std::string why;
  const std::string root = mirror::Root(g_client->image(), &why);
  if (root.empty()) return false;
  const Entry e = g_client->image().Get(id);
  Status s = mirror::Install(
      root, e,
      [&](int out) {
        off_t off = 0;
        while (static_cast<uint64_t>(off) < e.size) {
          ssize_t n = FS_REAL(sendfile, out, fd, &off, e.size - static_cast<uint64_t>(off));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "cannot copy " + Printable(e.path));
        }
        return Status::Ok();
      },
      path);
  if (s.ok()) MakeOriginDirs(fd, root, e);
  return s.ok();
}

int ReadShebang(int fd, Shebang* out) {
  // fs/binfmt_script.c, step by step: 256 bytes (NUL-padded past the end of a short file); the line ends at
  // '\n', or -- when there is none -- at the buffer's end, provided the interpreter's name ends before it; the
  // name runs to the first blank or NUL, and the rest of the line, blanks trimmed, is one argument.
  char buf[Shebang::kLine];
  memset(buf, 0, sizeof buf);
  if (FS_REAL(pread, fd, buf, sizeof buf, 0) < 2 || buf[0] != '#' || buf[1] != '!') return 0;
  auto spacetab = [](char c) { return c == ' ' || c == '\t'; };
  auto next_non_spacetab = [&](char* first, char* last) -> char* {  // both ends included, as the kernel's
    for (; first <= last; ++first)
      if (!spacetab(*first)) return first;
    return nullptr;
  };
  auto next_terminator = [&](char* first, char* last) -> char* {
    for (; first <= last; ++first)
      if (spacetab(*first) || *first == '\0') return first;
    return nullptr;
  };
  char* buf_end = buf + sizeof buf - 1;
  char* i_end = static_cast<char*>(memchr(buf, '\n', sizeof buf));
  if (i_end == nullptr) {
    i_end = next_non_spacetab(buf + 2, buf_end);
    if (i_end == nullptr || next_terminator(i_end, buf_end) == nullptr) return -1;  // a truncated name
    i_end = buf_end;
  }
  while (spacetab(i_end[-1])) --i_end;
  char* i_name = next_non_spacetab(buf + 2, i_end);
  if (i_name == nullptr || i_name == i_end) return -1;  // no interpreter
  char* i_arg = nullptr;
  char* i_sep = next_terminator(i_name, i_end);
  if (i_sep != nullptr && *i_sep != '\0') i_arg = next_non_spacetab(i_sep, i_end);
  *i_end = '\0';
  if (i_sep != nullptr) *i_sep = '\0';
  strcpy(out->interp, i_name);  // both fit: they lie within buf
  out->has_arg = i_arg != nullptr;
  strcpy(out->arg, i_arg != nullptr ? i_arg : "");
  return 1;
}

int ExecScript(const Shebang& sb, const char* path, char* const argv[], char* const envp[]) {
  if (t_script_depth >= kMaxScriptChain) {
    errno = ELOOP;
    return -1;
  }
  std::vector<char*> v;
  try {
    v = ScriptArgv(sb, path, argv);
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
  ++t_script_depth;
  execve(sb.interp, v.data(), envp);
  --t_script_depth;
  return -1;
}

bool RealScriptWithImageInterpreter(const char* path, Shebang* sb) {
  if (!Active()) return false;
  const int saved = errno;
  int fd = FS_REAL(open, path, O_RDONLY | O_CLOEXEC);
  bool ours = false;
  if (fd >= 0) {
    ours = ReadShebang(fd, sb) == 1 && sb->interp[0] == '/' && !SafeClassify(AT_FDCWD, sb->interp).pass();
    FS_REAL(close, fd);
  }
  errno = saved;
  return ours;
}

int Execvpe(const char* file, char* const argv[], char* const envp[]) {
  if (file == nullptr || *file == '\0') {
    errno = ENOENT;
    return -1;
  }
  if (strchr(file, '/') != nullptr) {
    execve(file, argv, envp);
    if (errno == ENOEXEC) ScriptExecute(file, argv, envp);
    return -1;
  }
  if (strnlen(file, NAME_MAX + 1) > NAME_MAX) {
    errno = ENAMETOOLONG;
    return -1;
  }
  bool eacces = false;
  int last = ENOENT;
  bool stop = ForEachCandidate(file, [&](const char* cand) {
    execve(cand, argv, envp);
    if (errno == ENOEXEC) ScriptExecute(cand, argv, envp);
    last = errno;
    switch (errno) {
      case EACCES: eacces = true; return false;
      case ENOENT:
      case ESTALE:
      case ENOTDIR:
      case ENODEV:
      case ETIMEDOUT: return false;
      default: return true;  // a real error: execvp reports it without trying further
    }
  });
  errno = (!stop && eacces) ? EACCES : last;
  return -1;
}

bool Spawn(pid_t* pid, const char* file, bool search, const posix_spawn_file_actions_t* fa,
           const posix_spawnattr_t* attr, char* const argv[], char* const envp[], int* rc) {
  if (file == nullptr || !Active()) return false;
  if (!search || strchr(file, '/') != nullptr) {
    Resolved r = SafeClassify(AT_FDCWD, file);
    if (r.pass()) return false;
    Serve(
        [&] {
          LookUp(&r);
          return 0;
        },
        0);
    *rc = r.kind == Resolved::kFail ? r.err : SpawnEntry(pid, r, file, fa, attr, argv, envp, 0);
    return true;
  }
  if (!SearchReachesImage()) return false;
  // posix_spawnp's search, done here: the first candidate that is an executable regular file, in the image
  // or on disk (a real one is spawned by its path, so a directory the mount covers is never searched).
  bool found = ForEachCandidate(file, [&](const char* cand) {
    Resolved r = SafeClassify(AT_FDCWD, cand);
    if (r.pass()) {
      const char* real = r.PassPath(cand);
      struct stat st;
      if (FS_REAL(stat, real, &st) != 0 || !S_ISREG(st.st_mode) || FS_REAL(access, real, X_OK) != 0) return false;
      std::string why;
      *rc = handover::Needed(real, false, &why) ? handover::Spawn(pid, real, fa, attr, argv, envp, why)
                                                : FS_REAL(posix_spawn, pid, real, fa, attr, argv, envp);
      return true;
    }
    bool runnable = Serve(
        [&] {
          LookUp(&r);
          return r.kind == Resolved::kOurs && g_client->image().Get(r.id).is_reg() &&
                 AccessEntry(r.id, X_OK, true) == 0;
        },
        false);
    if (!runnable) return false;
    *rc = SpawnEntry(pid, r, cand, fa, attr, argv, envp, 0);
    return true;
  });
  if (!found) *rc = ENOENT;
  return true;
}

}  // namespace fanstore::interpose::exec_path
