// Asynchronous I/O entry points: libaio (io_setup, io_queue_init, io_submit), liburing's ring set-up, and
// POSIX AIO (aio_read..., lio_listio). The kernel (or glibc's helper threads, with internal calls) reads
// the submitted fds where no wrapper sees it, so lazy fds become real files before they get there.
#include <aio.h>
#include <errno.h>
#include <linux/aio_abi.h>

#include "async_io.hpp"
#include "lazy.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// libaio and liburing report errors as -errno; a missing library (the program cannot have called us
// through it, but dlsym(RTLD_DEFAULT) finds our name) says -ENOSYS.
template <class Fn, class... A>
int CallNegErrno(Sym s, A... a) {
  Fn f = RealFn<Fn>(s);
  if (f == nullptr) return -ENOSYS;
  return f(a...);
}
#define FS_REAL_NEG(name, ...) CallNegErrno<decltype(&::name)>(Sym::name, __VA_ARGS__)

// Materializes the fds of the first `nr` requests; returns how many can be submitted (all, or those
// before the first that failed, with *err set).
template <class Fd>
long PrepareBatch(long nr, Fd fd_of, int* err) {
  if (!lazy::Any()) return nr;
  for (long i = 0; i < nr; ++i) {
    int fd = fd_of(i);
    if (fd >= 0 && async_io::BeforeSubmit(fd) != 0) {
      *err = errno;
      return i;
    }
  }
  return nr;
}

// POSIX AIO: glibc's helper threads call pread/pwrite/fsync internally on aio_fildes.
template <class Cb, class Real>
int AioOne(Cb* cb, Real real) {
  if (cb != nullptr && async_io::BeforeSubmit(cb->aio_fildes) != 0) return -1;
  return real();
}

template <class Cb, class Real>
int LioListio(Cb* const list[], int nent, Real real) {
  int err = 0;
  long ok = PrepareBatch(
      nent < 0 ? 0 : nent, [&](long i) { return list[i] ? list[i]->aio_fildes : -1; }, &err);
  if (ok < nent) {
    errno = err;
    return -1;
  }
  return real();
}

}  // namespace

// ---- libaio ----

FS_WRAPPER(int, io_setup, (int maxevents, io_context_t* ctxp)) {
  async_io::Enter();
  return FS_REAL_NEG(io_setup, maxevents, ctxp);
}

FS_WRAPPER(int, io_queue_init, (int maxevents, io_context_t* ctxp)) {
  async_io::Enter();
  return FS_REAL_NEG(io_queue_init, maxevents, ctxp);
}

FS_WRAPPER(int, io_submit, (io_context_t ctx, long nr, struct iocb* ios[])) {
  async_io::Enter();  // a context made with a raw syscall: later opens must be eager too
  int err = 0;
  long ok = nr > 0 && ios != nullptr
                ? PrepareBatch(
                      nr, [&](long i) { return ios[i] ? static_cast<int>(ios[i]->aio_fildes) : -1; }, &err)
                : nr;
  if (ok == 0 && nr > 0) return -err;  // nothing submitted: what io_submit says when its first iocb fails
  return FS_REAL_NEG(io_submit, ctx, ok, ios);
}

// ---- liburing: its set-up makes the syscall inline, so the library's entry points are hooked ----

FS_WRAPPER(int, io_uring_setup, (unsigned entries, struct io_uring_params* p)) {
  async_io::Enter();
  return FS_REAL_NEG(io_uring_setup, entries, p);
}

FS_WRAPPER(int, io_uring_queue_init, (unsigned entries, struct io_uring* ring, unsigned flags)) {
  async_io::Enter();
  return FS_REAL_NEG(io_uring_queue_init, entries, ring, flags);
}

FS_WRAPPER(int, io_uring_queue_init_params, (unsigned entries, struct io_uring* ring, struct io_uring_params* p)) {
  async_io::Enter();
  return FS_REAL_NEG(io_uring_queue_init_params, entries, ring, p);
}

FS_WRAPPER(int, io_uring_queue_init_mem,
           (unsigned entries, struct io_uring* ring, struct io_uring_params* p, void* buf, size_t buf_size)) {
  async_io::Enter();
  return FS_REAL_NEG(io_uring_queue_init_mem, entries, ring, p, buf, buf_size);
}

// ---- POSIX AIO ----

FS_WRAPPER(int, aio_read, (struct aiocb * cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_read, cb); });
}
FS_WRAPPER(int, aio_read64, (struct aiocb64 * cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_read64, cb); });
}
FS_WRAPPER(int, aio_write, (struct aiocb * cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_write, cb); });
}
FS_WRAPPER(int, aio_write64, (struct aiocb64 * cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_write64, cb); });
}
FS_WRAPPER(int, aio_fsync, (int op, struct aiocb* cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_fsync, op, cb); });
}
FS_WRAPPER(int, aio_fsync64, (int op, struct aiocb64* cb)) {
  return AioOne(cb, [&] { return FS_REAL(aio_fsync64, op, cb); });
}
FS_WRAPPER(int, lio_listio, (int mode, struct aiocb* const list[], int nent, struct sigevent* sig)) {
  return LioListio(list, nent, [&] { return FS_REAL(lio_listio, mode, list, nent, sig); });
}
FS_WRAPPER(int, lio_listio64, (int mode, struct aiocb64* const list[], int nent, struct sigevent* sig)) {
  return LioListio(list, nent, [&] { return FS_REAL(lio_listio64, mode, list, nent, sig); });
}
