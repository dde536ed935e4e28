"""HintingSampler (tools/python/fanstore_prefetch.py) without a daemon that answers: the order is always the
sampler's; a missing socket warns once and is tried again each epoch; a daemon that takes the connection and never
replies costs one timeout, not one per epoch (it once cost 10 s every epoch); a name that is not UTF-8
is sent as its bytes. Usage: prefetch_sampler_test.py SRC"""
import contextlib
import io
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(sys.argv[1], "tools", "python"))
from fanstore_prefetch import HintingSampler  # noqa: E402

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

print(f"prefetch_sampler_test: {len(failed)} failure(s)")
sys.exit(1 if failed else 0)
