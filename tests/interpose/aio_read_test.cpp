// One reader per fio engine (psync, pvsync2, libaio, io_uring through liburing and through syscall(2),
// posixaio, mmap), run on a file under the mount: every block read must equal the source file's bytes.
// Sequential and random order, 4 KiB and 1 MiB blocks, with the file opened before and after the async
// I/O set-up (a lazy fd must become real before the kernel sees it, and later opens must be real at once).
// Usage: aio_read_test SOURCE_FILE MOUNTED_FILE [ENGINE]   (one engine per process: the first pass of a
// kernel-async engine then reads an fd that was lazy when its ring or context was made)
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

std::string g_src;  // the source file's bytes
int g_failed = 0;

// Block offsets of one pass: in order, or shuffled with a fixed seed.
std::vector<off_t> Offsets(size_t bs, bool random) {
  std::vector<off_t> v;
  for (size_t off = 0; off < g_src.size(); off += bs) v.push_back(static_cast<off_t>(off));
  if (random) std::shuffle(v.begin(), v.end(), std::mt19937(1234));
  return v;
}

// Compares one completed block with the source: `n` bytes at `off`, which must be the whole block or
// the tail of the file.
bool Same(const char* buf, off_t off, long n, size_t bs) {
  size_t want = std::min(bs, g_src.size() - static_cast<size_t>(off));
  return n == static_cast<long>(want) && memcmp(buf, g_src.data() + off, want) == 0;
}

// An engine reads every block of `offs` from fd with block size bs and says whether all matched. `err`
// gets the first errno seen.
using Engine = std::function<bool(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err)>;

bool Psync(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err) {
  std::vector<char> buf(bs);
  for (off_t off : offs) {
    ssize_t n = pread(fd, buf.data(), bs, off);
    if (n < 0) *err = strerror(errno);
    if (!Same(buf.data(), off, n, bs)) return false;
  }
  return true;
}

bool Pvsync2(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err) {
  std::vector<char> buf(bs);
  for (off_t off : offs) {
    struct iovec iov = {buf.data(), bs};
    ssize_t n = preadv2(fd, &iov, 1, off, RWF_HIPRI);
    if (n < 0) *err = strerror(errno);
    if (!Same(buf.data(), off, n, bs)) return false;
  }
  return true;
}

bool Mmap(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err) {
  void* p = mmap(nullptr, g_src.size(), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = strerror(errno);
    return false;
  }
  bool ok = true;
  for (off_t off : offs)
    ok = ok && Same(static_cast<char*>(p) + off, off, static_cast<long>(std::min(bs, g_src.size() - off)), bs);
  munmap(p, g_src.size());
  return ok;
}

constexpr int kDepth = 8;  // requests in flight

bool Libaio(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err) {
  io_context_t ctx = nullptr;
  if (int rc = io_setup(kDepth, &ctx); rc < 0) {
    *err = strerror(-rc);
    return false;
  }
  std::vector<std::vector<char>> bufs(kDepth, std::vector<char>(bs));
  std::vector<struct iocb> cbs(kDepth);
  bool ok = true;
  for (size_t i = 0; i < offs.size() && ok; i += kDepth) {
    size_t k = std::min<size_t>(kDepth, offs.size() - i);
    std::vector<struct iocb*> ptrs;
    for (size_t j = 0; j < k; ++j) {
      io_prep_pread(&cbs[j], fd, bufs[j].data(), bs, offs[i + j]);
      cbs[j].data = reinterpret_cast<void*>(j);
      ptrs.push_back(&cbs[j]);
    }
    int rc = io_submit(ctx, static_cast<long>(k), ptrs.data());
    if (rc != static_cast<int>(k)) {
      *err = rc < 0 ? strerror(-rc) : "short submit";
      ok = false;
      break;
    }
    struct io_event ev[kDepth];
    int got = 0;
    while (got < static_cast<int>(k)) {
      int n = io_getevents(ctx, 1, kDepth, ev + got, nullptr);
      if (n < 0) {
        *err = strerror(-n);
        ok = false;
        break;
      }
      got += n;
    }
    for (int e = 0; e < got && ok; ++e) {
      size_t j = reinterpret_cast<size_t>(ev[e].data);
      long res = static_cast<long>(ev[e].res);
      if (res < 0) *err = strerror(static_cast<int>(-res));
      ok = Same(bufs[j].data(), offs[i + j], res, bs);
    }
  }
  io_destroy(ctx);
  return ok;
}

// io_uring with the ring made by liburing's init, or by the raw syscall as fio does it; `fixed`: the fd is
// registered with the ring and named by its index (IOSQE_FIXED_FILE).
bool Uring(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err, bool raw_setup, bool fixed = false) {
  struct io_uring ring;
  int rc;
  if (raw_setup) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int rfd = static_cast<int>(syscall(__NR_io_uring_setup, kDepth, &p));
    rc = rfd < 0 ? -errno : io_uring_queue_mmap(rfd, &p, &ring);
  } else {
    rc = io_uring_queue_init(kDepth, &ring, 0);
  }
  if (rc < 0) {
    *err = std::string("ring set-up: ") + strerror(-rc);
    return false;
  }
  if (fixed && (rc = io_uring_register_files(&ring, &fd, 1)) < 0) {
    *err = std::string("register files: ") + strerror(-rc);
    io_uring_queue_exit(&ring);
    return false;
  }
  std::vector<std::vector<char>> bufs(kDepth, std::vector<char>(bs));
  bool ok = true;
  for (size_t i = 0; i < offs.size() && ok; i += kDepth) {
    size_t k = std::min<size_t>(kDepth, offs.size() - i);
    for (size_t j = 0; j < k; ++j) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fixed ? 0 : fd, bufs[j].data(), static_cast<unsigned>(bs),
                         static_cast<__u64>(offs[i + j]));
      if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, j);
    }
    if (int s = io_uring_submit(&ring); s != static_cast<int>(k)) {
      *err = s < 0 ? strerror(-s) : "short submit";
      ok = false;
      break;
    }
    for (size_t got = 0; got < k && ok; ++got) {
      struct io_uring_cqe* cqe;
      if (int w = io_uring_wait_cqe(&ring, &cqe); w < 0) {
        *err = strerror(-w);
        ok = false;
        break;
      }
      size_t j = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      if (cqe->res < 0) *err = strerror(-cqe->res);
      ok = Same(bufs[j].data(), offs[i + j], cqe->res, bs);
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  io_uring_queue_exit(&ring);
  return ok;
}

bool Posixaio(int fd, size_t bs, const std::vector<off_t>& offs, std::string* err) {
  std::vector<std::vector<char>> bufs(kDepth, std::vector<char>(bs));
  std::vector<struct aiocb> cbs(kDepth);
  bool ok = true;
  for (size_t i = 0; i < offs.size() && ok; i += kDepth) {
    size_t k = std::min<size_t>(kDepth, offs.size() - i);
    std::vector<struct aiocb*> list;
    for (size_t j = 0; j < k; ++j) {
      memset(&cbs[j], 0, sizeof cbs[j]);
      cbs[j].aio_fildes = fd;
      cbs[j].aio_buf = bufs[j].data();
      cbs[j].aio_nbytes = bs;
      cbs[j].aio_offset = offs[i + j];
      cbs[j].aio_lio_opcode = LIO_READ;
      list.push_back(&cbs[j]);
    }
    // Half through aio_read, half through lio_listio: both enqueue for glibc's helper threads.
    for (size_t j = 0; j < k / 2; ++j)
      if (aio_read(&cbs[j]) != 0) {
        *err = strerror(errno);
        return false;
      }
    if (k - k / 2 > 0 && lio_listio(LIO_WAIT, list.data() + k / 2, static_cast<int>(k - k / 2), nullptr) != 0) {
      *err = strerror(errno);
      ok = false;
    }
    for (size_t j = 0; j < k; ++j) {
      while (aio_error(&cbs[j]) == EINPROGRESS) {
        const struct aiocb* one[1] = {&cbs[j]};
        aio_suspend(one, 1, nullptr);
      }
      int e = aio_error(&cbs[j]);
      ssize_t n = aio_return(&cbs[j]);
      if (e != 0) *err = strerror(e);
      ok = ok && Same(bufs[j].data(), offs[i + j], n, bs);
    }
  }
  return ok;
}

std::string ReadFile(const char* path) {
  std::string out;
  FILE* f = fopen(path, "rb");
  if (!f) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: aio_read_test SOURCE_FILE MOUNTED_FILE [ENGINE]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_src = ReadFile(argv[1]);
  if (g_src.size() < (3u << 20)) {
    fprintf(stderr, "aio_read_test: %s must hold at least 3 MiB\n", argv[1]);
    return 2;
  }
  const std::vector<std::pair<const char*, Engine>> engines = {
      {"psync", Psync},
      {"pvsync2", Pvsync2},
      {"mmap", Mmap},
      {"posixaio", Posixaio},
      // The kernel-async engines last: once a process sets them up, its later opens are real at once.
      {"libaio", Libaio},
      {"io_uring",
       [](int fd, size_t bs, const std::vector<off_t>& o, std::string* e) { return Uring(fd, bs, o, e, false); }},
      {"io_uring-syscall",
       [](int fd, size_t bs, const std::vector<off_t>& o, std::string* e) { return Uring(fd, bs, o, e, true); }},
      {"io_uring-fixed",
       [](int fd, size_t bs, const std::vector<off_t>& o, std::string* e) { return Uring(fd, bs, o, e, false, true); }},
  };
  int ran = 0;
  for (const auto& [name, engine] : engines) {
    if (argc == 4 && strcmp(argv[3], name) != 0) continue;
    ++ran;
    for (size_t bs : {size_t{4096}, size_t{1} << 20}) {
      for (bool random : {false, true}) {
        // A fresh open per pass: a lazy fd (before any async set-up) and, later, fds opened after it.
        int fd = open(argv[2], O_RDONLY);
        std::string err;
        bool ok = fd >= 0 && engine(fd, bs, Offsets(bs, random), &err);
        if (fd < 0) err = strerror(errno);
        printf("%s %-16s bs=%-7zu %-8s%s%s\n", ok ? "ok  " : "FAIL", name, bs, random ? "randread" : "read",
               err.empty() ? "" : " error: ", err.c_str());
        g_failed += !ok;
        if (fd >= 0) close(fd);
      }
    }
  }
  if (ran == 0) {
    fprintf(stderr, "aio_read_test: no engine named %s\n", argv[3]);
    return 2;
  }
  printf("%d failed\n", g_failed);
  return g_failed ? 1 : 0;
}
