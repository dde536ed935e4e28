#!/usr/bin/python3
"""CPU of idle `fanstore serve` ranks: percent of one core each used over --seconds, averaged over the ranks under
mpirun --parent (optionally only rank --rank), after opening --idle-connections connections to --socket that never
send anything. Prints one number."""
import argparse
import os
import resource
import socket
import time


def descends(pid, ancestor):
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def serve_pids(parent):
    """rank -> pid of the `fanstore serve` processes under mpirun `parent` (tests/mpi uses it too)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if len(cmd) < 2 or not cmd[0].endswith(b"fanstore") or cmd[1] != b"serve" or not descends(int(d), parent):
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=")[1])] = int(d)
    return out


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_percent(pids, seconds):
    """Percent of one core each of `pids` used over the next `seconds` (utime+stime from /proc)."""
    t0 = {p: ticks(p) for p in pids}
    time.sleep(seconds)
    hz = os.sysconf("SC_CLK_TCK")
    return [100.0 * (ticks(p) - t0[p]) / hz / seconds for p in pids]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--parent", type=int, required=True, help="mpirun's pid")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--settle", type=float, default=1, help="seconds to let the daemons reach their idle wait")
    ap.add_argument("--socket")
    ap.add_argument("--idle-connections", type=int, default=0)
    a = ap.parse_args()
    conns = []
    if a.idle_connections:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < a.idle_connections + 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, a.idle_connections + 64), hard))
        for _ in range(a.idle_connections):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(a.socket)
            conns.append(s)
    pids = [p for r, p in serve_pids(a.parent).items() if a.rank is None or r == a.rank]
    if not pids:
        raise SystemExit("daemon_cpu: no fanstore serve under that mpirun")
    time.sleep(a.settle)
    pct = cpu_percent(pids, a.seconds)
    print(f"{sum(pct) / len(pct):.2f}")


if __name__ == "__main__":
    main()
