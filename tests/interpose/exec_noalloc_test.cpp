// exec without allocating: a forked child of a multithreaded program (another thread may have held the
// allocator's lock at the fork) or of a crash handler may call only async-signal-safe functions, and execve is
// one. So the preload's exec wrappers must not call malloc on the way to exec an ordinary dynamic program
// (outside a virtual cwd). This program's malloc/calloc/realloc/free -- which every library, the preload's
// static libstdc++ included, calls -- end the child with status 99 once it is forbidden.
// Usage (under `fanstore run`): exec_noalloc_test PROGRAM   (an absolute path to `true`, longer than 15 bytes)
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
}

namespace {
volatile int g_forbid = 0;
[[noreturn]] void Die(const char* what) {
  ssize_t ignored = write(2, what, strlen(what));
  (void)ignored;
  _exit(99);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  if (g_forbid) Die("malloc in the child before exec\n");
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  if (g_forbid) Die("calloc in the child before exec\n");
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  if (g_forbid) Die("realloc in the child before exec\n");
  return __libc_realloc(p, n);
}
void free(void* p) {
  if (g_forbid && p != nullptr) Die("free in the child before exec\n");
  __libc_free(p);
}
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: exec_noalloc_test /ABSOLUTE/PATH/TO/true\n");
    return 2;
  }
  const char* prog = argv[1];
  const char* modes[] = {"execve", "execv", "execvp (PATH search)", "execl", "execlp (PATH search)", "execle"};
  int failed = 0;
  for (int m = 0; m < 6; ++m) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      char arg0[] = "true";
      char* av[] = {arg0, nullptr};
      char* env[] = {nullptr};
      g_forbid = 1;
      switch (m) {
        case 0: execve(prog, av, environ); break;
        case 1: execv(prog, av); break;
        case 2: execvp("true", av); break;
        case 3: execl(prog, "true", static_cast<char*>(nullptr)); break;
        case 4: execlp("true", "true", static_cast<char*>(nullptr)); break;
        case 5: execle(prog, "true", static_cast<char*>(nullptr), env); break;
      }
      Die("exec failed\n");
    }
    int st = 0;
    waitpid(pid, &st, 0);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("%s %s\n", ok ? "ok  " : "FAIL", modes[m]);
    failed += !ok;
  }
  return failed != 0;
}
