// Kernel asynchronous I/O (libaio, io_uring): the kernel reads the fds a program submits with no wrapper
// in between, so a lazy fd must be a real file before it can be submitted.
#pragma once

namespace fanstore::interpose::async_io {

// The process sets up kernel async I/O (io_setup, io_uring_setup, io_uring_register): from now on every
// open of an image file returns a real memfd at once, and every lazy fd is materialized now. Idempotent.
void Enter();
// True once Enter() ran in this process (or a parent it forked from).
bool Eager();
// Before a submission naming fd (io_submit's iocbs, POSIX aio_read...): materialize it when it is lazy.
// 0, or -1 with errno (the submission then fails with it, never EBADF).
int BeforeSubmit(int fd);

}  // namespace fanstore::interpose::async_io
