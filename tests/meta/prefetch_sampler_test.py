"""HintingSampler (tools/python/fanstore_prefetch.py) without a daemon that answers: the order is always the
sampler's; a missing socket warns once and is tried again each epoch; a daemon that takes the connection and never
replies costs one timeout, not one per epoch (it once cost 10 s every epoch); a name that is not UTF-8
is sent as its bytes. Usage: prefetch_sampler_test.py SRC"""
import contextlib
import io
import os
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(sys.argv[1], "tools", "python"))
import fanstore_prefetch  # noqa: E402
from fanstore_prefetch import HintingSampler, image_relative, paths_of  # noqa: E402

failed = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failed.append(what)


def epochs(sampler, n):
    err = io.StringIO()
    t = time.monotonic()
    with contextlib.redirect_stderr(err):
        orders = [list(sampler) for _ in range(n)]
    return orders, time.monotonic() - t, err.getvalue()


with tempfile.TemporaryDirectory() as d:
    order = [3, 1, 2, 0]
    paths = [f"/fanstore/f{i}" for i in range(4)]

    missing = os.path.join(d, "none.sock")
    orders, _, err = epochs(HintingSampler(order, paths, socket_path=missing), 3)
    check(orders == [order] * 3, "no daemon: every epoch yields the sampler's order")
    check(err.count("\n") == 1 and f"from the daemon at {missing} (" in err, f"no daemon: one warning naming it: {err!r}")

    silent = os.path.join(d, "silent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(silent)
    srv.listen(16)  # accepts (the kernel's backlog) and never replies: a stopped daemon
    orders, took, err = epochs(HintingSampler(order, paths, socket_path=silent, timeout=0.5), 3)
    check(orders == [order] * 3, "a silent daemon: every epoch yields the sampler's order")
    check(took < 1.4, f"a silent daemon: 3 epochs cost one timeout (0.5 s), not three: {took:.2f} s")
    check(err.count("\n") == 1 and "no more hints from this sampler" in err, f"a silent daemon: one warning: {err!r}")
    srv.close()

    # A name that is not UTF-8 (os.listdir gives it surrogate-escaped) goes to the daemon as its own bytes; it
    # once raised UnicodeEncodeError out of the epoch.
    odd = [paths[0], os.fsdecode(b"/fanstore/caf\xe9.bin")]
    orders, _, err = epochs(HintingSampler([1, 0], odd, socket_path=missing), 1)
    check(orders == [[1, 0]], f"a name that is not UTF-8, no daemon: the sampler's order: {err!r}")
    recording = os.path.join(d, "recording.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(recording)
    srv.listen(1)
    got = bytearray()

    def record():
        conn, _ = srv.accept()
        conn.settimeout(5)
        with conn:
            while b"caf" not in got:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                got.extend(chunk)

    t = threading.Thread(target=record)
    t.start()
    orders, _, err = epochs(HintingSampler([1, 0], odd, socket_path=recording, timeout=2), 1)
    t.join()
    srv.close()
    check(orders == [[1, 0]], "a name that is not UTF-8: the sampler's order")
    check(b"caf\xe9.bin" in got and b"f0" in got, f"a name that is not UTF-8 is sent as its bytes: {bytes(got)!r}")



# paths_of: torchvision's `samples`, random_split's Subset and ConcatDataset (duck-typed as torch's), a list; any
# other dataset is refused rather than listed, which loaded every sample (and then crashed the first epoch).
class Folder:
    def __init__(self, names):
        self.samples = [(f"/fanstore/{n}", 0) for n in names]


class Subset:
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices


class Concat:
    def __init__(self, datasets):
        self.datasets, self.cumulative_sizes = datasets, []


class Loads:
    loaded = 0

    def __len__(self):
        return 3

    def __getitem__(self, i):
        Loads.loaded += 1
        if i >= 3:
            raise IndexError(i)
        return (b"pixels", 0)


a, b = Folder(["a0", "a1", "a2"]), Folder(["b0", "b1"])
check(paths_of(Subset(a, [2, 0])) == ["/fanstore/a2", "/fanstore/a0"], "paths_of a Subset: its indices' paths")
check(paths_of(Concat([Subset(a, [1]), b])) == ["/fanstore/a1", "/fanstore/b0", "/fanstore/b1"],
      "paths_of a ConcatDataset: its parts' paths in order")
check(paths_of(("/fanstore/x", "/fanstore/y")) == ["/fanstore/x", "/fanstore/y"], "paths_of a tuple of paths")
try:
    paths_of(Loads())
    check(False, "paths_of a dataset without paths is refused")
except TypeError as e:
    check(Loads.loaded == 0 and "give HintingSampler a list of paths" in str(e),
          f"paths_of a dataset without paths: TypeError, no sample loaded: {e}")

# Paths it cannot make (a tuple, an exception) warn once and leave the order alone.
orders, _, err = epochs(HintingSampler([1, 0], lambda i: ("/fanstore/x", i), socket_path=missing), 2)
check(orders == [[1, 0]] * 2 and err.count("\n") == 1 and "the paths of the epoch's samples failed" in err,
      f"paths that are not paths: the sampler's order, one warning: {err!r}")

# A relative path is one from the working directory when that is under the mount (a program under `fanstore run`
# that chdir'ed into the image), else image-relative.
check(image_relative("train/x.jpg", "/fanstore", "/fanstore/imgs") == "imgs/train/x.jpg",
      "a relative path from a directory of the image")
check(image_relative("train/x.jpg", "/fanstore", "/home/u") == "train/x.jpg", "a relative path from elsewhere")
check(image_relative("/data/x.jpg", "/fanstore", "/fanstore") is None, "an absolute path outside the mount")

# A daemon that finds none of the hinted paths in the image: one warning saying so, not silence every epoch.
with tempfile.TemporaryDirectory() as d:
    answering = os.path.join(d, "answering.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(answering)
    srv.listen(4)

    def answer(n):
        for _ in range(n):
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(5)
                head = conn.recv(fanstore_prefetch._REQ.size, socket.MSG_WAITALL)
                fields = fanstore_prefetch._REQ.unpack(head)
                conn.recv(fields[-1], socket.MSG_WAITALL)
                payload = struct.pack("<QQQQ", 0, 0, 2, 0)  # nothing remote or local: 2 not files of the image
                conn.sendall(fanstore_prefetch._REP.pack(fanstore_prefetch._REPLY_MAGIC, fanstore_prefetch._VERSION,
                                                         fanstore_prefetch._PREFETCH, fields[3], 0, 0, len(payload),
                                                         0, 0, 0) + payload)

    t = threading.Thread(target=answer, args=(2,))
    t.start()
    orders, _, err = epochs(HintingSampler([1, 0], ["/fanstore/no1", "/fanstore/no2"], socket_path=answering), 2)
    t.join()
    srv.close()
    check(orders == [[1, 0]] * 2 and err.count("\n") == 1 and "none of the 2 paths hinted" in err,
          f"hints of no file of the image: one warning: {err!r}")

print(f"prefetch_sampler_test: {len(failed)} failure(s)")
sys.exit(1 if failed else 0)
