#!/usr/bin/python3
"""CPU that remote reads cost: runs COMMAND (a client reading remote files through rank 0's daemon whose last line
is fanstore-iobench's CSV: its 4th field the files read, its 5th the seconds it timed) and prints one CSV line, per
1,000 files: the client's timed seconds, its CPU seconds (getrusage of the child), the asking daemon's (rank 0) and
the owning daemons' (every other rank, summed), from the serve processes' utime+stime in /proc (what
getrusage(RUSAGE_SELF) reports inside them).
Usage: remote_cost.py --parent MPIRUN_PID -- COMMAND..."""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_cpu import serve_pids, ticks  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--parent", type=int, required=True, help="mpirun's pid")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    pids = serve_pids(a.parent)
    if 0 not in pids or len(pids) < 2:
        raise SystemExit(f"remote_cost: found ranks {sorted(pids)} under that mpirun, need rank 0 and an owner")
    hz = os.sysconf("SC_CLK_TCK")
    t0 = {r: ticks(p) for r, p in pids.items()}
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, ru = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"remote_cost: the client exited {os.waitstatus_to_exitcode(status)}")
    cpu = {r: (ticks(p) - t0[r]) / hz for r, p in pids.items()}
    try:
        fields = out.strip().splitlines()[-1].split(",")
        files, wall = int(fields[3]), float(fields[4])
    except (IndexError, ValueError):
        raise SystemExit(f"remote_cost: no file count in the client's output: {out!r}")
    k = 1000.0 / files
    owners = sum(v for r, v in cpu.items() if r != 0)
    print(f"{wall * k:.3f},{(ru.ru_utime + ru.ru_stime) * k:.3f},{cpu[0] * k:.3f},{owners * k:.3f}")


if __name__ == "__main__":
    main()
