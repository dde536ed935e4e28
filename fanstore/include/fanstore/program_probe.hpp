// Which programs an LD_PRELOAD library cannot reach: statically linked ones, other ELF classes, and those
// the kernel runs in secure mode. `fanstore run` and the interposer's exec wrappers hand them FUSE instead.
#pragma once

#include <string>

namespace fanstore {

enum class PreloadReach {
  kReached,  // a dynamically linked program of this machine's class: the loader applies LD_PRELOAD
  kStatic,   // no PT_INTERP: statically linked (static-pie included), no loader at all
  kForeign,  // an ELF file of another class or machine (a 32-bit program): the loader refuses the library
  kSecure,   // set-user/group-ID or file capabilities that change its privileges: the loader ignores LD_PRELOAD
};

struct ProgramProbe {
  PreloadReach reach = PreloadReach::kReached;
  std::string program;  // the file that decided it: the resolved command, or its "#!" interpreter
  // "statically linked", "a 32-bit or foreign ELF program", "set-user-ID", "set-group-ID", "file capabilities"
  std::string why;
};

// Resolves `command` as execvp does (a PATH search when it has no '/'; `search_path` null: $PATH, or
// "/bin:/usr/bin" when that is unset; relative names against the cwd), follows "#!" lines to their
// interpreter (up to 4 levels, as the kernel), and inspects that ELF file. A missing, unreadable or non-ELF
// file is kReached: the exec itself reports what is wrong.
ProgramProbe ProbeProgram(const std::string& command, const char* search_path = nullptr);

// A set-ID program (kSecure) started by a user other than root: FUSE would need a user namespace, where the
// kernel ignores set-ID bits and file capabilities, so the program would lose the privileges it exists for
// (sudo, su, mount, passwd, fusermount3, ping...). Such a program is run as is, privileged and without the
// image, after PrivilegedWithoutImage's line: neither refused nor silently stripped.
bool FuseWouldDropPrivileges(const ProgramProbe& p);
// That line, without a prefix: "/usr/bin/su runs with set-user-ID: it keeps its privileges and runs without
// the image under /fanstore ...".
std::string PrivilegedWithoutImage(const ProgramProbe& p, const std::string& mount);

// The ELF check alone, on an open file (e.g. the memfd of a program stored in an image). Reads with
// pread; the file offset is not moved. Non-ELF or unreadable: kReached.
PreloadReach ProbeElfFd(int fd, std::string* why = nullptr);

}  // namespace fanstore
