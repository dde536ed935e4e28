// Prototypes of the libc symbols we interpose that glibc 2.36 headers no longer (or only conditionally) declare.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>

extern "C" {
// Fortified variants that -D_FORTIFY_SOURCE builds call instead of open/openat/getcwd/readlink/realpath.
int __open_2(const char* path, int flags) noexcept;
int __open64_2(const char* path, int flags) noexcept;
int __openat_2(int dirfd, const char* path, int flags) noexcept;
int __openat64_2(int dirfd, const char* path, int flags) noexcept;
char* __getcwd_chk(char* buf, size_t size, size_t buflen) noexcept;
ssize_t __readlink_chk(const char* path, char* buf, size_t len, size_t buflen) noexcept;
ssize_t __readlinkat_chk(int dirfd, const char* path, char* buf, size_t len, size_t buflen) noexcept;
char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen) noexcept;
// Fortified reads (served for lazy fds: glibc's own versions would call the kernel with the placeholder).
ssize_t __read_chk(int fd, void* buf, size_t nbytes, size_t buflen) noexcept;
ssize_t __pread_chk(int fd, void* buf, size_t nbytes, off_t offset, size_t buflen) noexcept;
ssize_t __pread64_chk(int fd, void* buf, size_t nbytes, off64_t offset, size_t buflen) noexcept;
void __chk_fail(void) __attribute__((noreturn));
// The pre-2.33 stat ABI that binaries built against older glibc still call.
int __xstat(int ver, const char* path, struct stat* st) noexcept;
int __xstat64(int ver, const char* path, struct stat64* st) noexcept;
int __lxstat(int ver, const char* path, struct stat* st) noexcept;
int __lxstat64(int ver, const char* path, struct stat64* st) noexcept;
int __fxstat(int ver, int fd, struct stat* st) noexcept;
int __fxstat64(int ver, int fd, struct stat64* st) noexcept;
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) noexcept;
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) noexcept;
}

// libaio (libaio.so.1) and liburing (liburing.so.2), interposed when the program uses them; declared here
// so the preload needs neither library nor its headers. libaio's struct iocb is the kernel's
// (linux/aio_abi.h), and both return -errno rather than setting errno.
struct io_context;
typedef struct io_context* io_context_t;
struct iocb;
struct io_uring;
struct io_uring_params;
extern "C" {
int io_setup(int maxevents, io_context_t* ctxp) noexcept;
int io_queue_init(int maxevents, io_context_t* ctxp) noexcept;
int io_submit(io_context_t ctx, long nr, struct iocb* ios[]) noexcept;
int io_uring_setup(unsigned entries, struct io_uring_params* p) noexcept;
int io_uring_queue_init(unsigned entries, struct io_uring* ring, unsigned flags) noexcept;
int io_uring_queue_init_params(unsigned entries, struct io_uring* ring, struct io_uring_params* p) noexcept;
int io_uring_queue_init_mem(unsigned entries, struct io_uring* ring, struct io_uring_params* p, void* buf,
                            size_t buf_size) noexcept;
}
