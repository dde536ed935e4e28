// Lazy fds: open() of an image file hands out a cheap placeholder fd and serves reads in user space through
// the client's range reads (only the chunks read are decoded); a real kernel fd (the node chunk cache's shared copy
// of a large file, or a memfd) is put under the same fd number only when the kernel must see it.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "fanstore/client.hpp"
#include "fd_table.hpp"

namespace fanstore::interpose::lazy {

// The user-space open file description of a lazy fd: shared by every fd number dup'd from it, like
// the kernel's (one offset, one set of status flags).
struct LazyFile;

// Every fd number that is lazy right now -> its LazyFile (nullptr: not lazy). Zero pages until touched.
extern std::atomic<LazyFile*> g_slots[FdTable::kCapacity];
extern std::atomic<int> g_live;  // number of lazy fd numbers

inline bool Is(int fd) {
  return fd >= 0 && fd < FdTable::kCapacity && g_slots[fd].load(std::memory_order_acquire) != nullptr;
}
inline bool Any() { return g_live.load(std::memory_order_acquire) != 0; }

// Start-up: the placeholder every lazy fd is a dup of (an O_PATH fd on a socket inode: read, mmap,
// lseek... give EBADF in the kernel, reopening it through /proc gives ENXIO, openat relative to it
// ENOTDIR). False: lazy fds are off (no placeholder, or FANSTORE_LAZY=0).
bool Init();
bool Enabled();
// fd identity: is fd (still) a dup of the placeholder, i.e. one of our lazy fds? One fstat.
bool IsPlaceholderFile(int fd);
// The kernel handed the number `fd` to the program: if it was the placeholder (closed behind our back by
// a raw syscall), make a new one.
void PlaceholderLost(int fd);

// A lazy fd for entry `id` whose bytes `file` reads (open flags: O_CLOEXEC, status flags). -1 + errno.
int Open(uint32_t id, std::shared_ptr<OpenFile> file, int flags);

// fd stops being lazy (close, or the program dup2'ed another file over it).
void Forget(int fd);
// A dup syscall (`dup_fn`) of lazy `from`, run so that no materialization can slip between the syscall
// and the new number taking `from`'s state (which would leave it a bare placeholder). False: `from` is
// not lazy (any more); the caller dups it as a real fd. Otherwise *out = dup_fn's result.
bool Dup(int from, int (*dup_fn)(void* ctx), void* ctx, int* out);
// After a successful dup of `from` onto `to`: `to` shares `from`'s lazy state, or stops being lazy.
void CopyOnDup(int from, int to);

// Puts a real kernel fd holding the bytes (OpenFile::KernelFd), at the shared offset, under fd and under every other fd
// number sharing its state (FD_CLOEXEC of each kept). 0 when done or fd is not lazy; -1 + errno on failure.
int Materialize(int fd);
// open("/dev/fd/N"), open("/proc/self/fd/N") (also /dev/stdin, /dev/stdout, /dev/stderr) reopen fd N
// in the kernel: materialize N first when it is lazy. Cheap when no fd is lazy.
void BeforeReopen(const char* path);
// Materializes every lazy fd (only_inheritable: only those without FD_CLOEXEC), for exec and spawn.
void MaterializeAll(bool only_inheritable);

// The calls served in user space. Each returns false when fd turned out not to be lazy (a race with
// close/materialize): the caller then calls libc. Results follow the kernel's (result or -1 + errno).
// `pos` < 0: use and advance the shared offset.
bool Read(int fd, void* buf, size_t n, off_t pos, bool positional, ssize_t* out);
bool ReadV(int fd, const struct iovec* iov, int iovcnt, off_t pos, bool positional, ssize_t* out);
// sendfile/copy_file_range from a lazy fd: hands [at, at+n) clipped to EOF (at = *pos, or the shared
// offset when pos is null) to `sink`, outside every lock (it may block on a pipe), and advances *pos or
// the offset by what the sink took. `sink` returns bytes taken or -1 + errno.
bool Transfer(int fd, int64_t* pos, size_t n, ssize_t (*sink)(void* ctx, const char* p, size_t n), void* ctx,
              ssize_t* out);
bool Seek(int fd, off_t off, int whence, off_t* out);
bool GetFl(int fd, int* out);
bool SetFl(int fd, int flags, int* out);

// pthread_atfork: the parent and child would share the offset of an inherited lazy fd, which two
// processes cannot do in user space, so every lazy fd is materialized first; then no lazy call runs
// across the fork (so no lock of ours is held in the child).
void LockForFork();
void UnlockForFork(bool child);

}  // namespace fanstore::interpose::lazy
