"""HintingSampler (tools/python/fanstore_prefetch.py) without a daemon that answers: the order is always the
sampler's; a missing socket warns once and is tried again each epoch; a daemon that takes the connection and never
replies costs one timeout, not one per epoch (it once cost 10 s every epoch). Usage: prefetch_sampler_test.py SRC"""
import contextlib
import io
import os
import socket
import sys
import tempfile
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

print(f"prefetch_sampler_test: {len(failed)} failure(s)")
sys.exit(1 if failed else 0)
