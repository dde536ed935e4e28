#!/usr/bin/python3
"""Metadata calls as Python's import probing makes them, timed in-process: os.stat of 4,000 files 6 directories
deep and of 8,000 names that are not there, best of 5 rounds, in microseconds per call.
Usage: stat_probe.py make SRC            (writes the tree)
       fanstore run --image IMG -- /usr/bin/python3 stat_probe.py time /fanstore
       /usr/bin/python3 stat_probe.py time SRC   (the same calls on the plain tree)"""
import os
import sys
import time


def paths():
    return [f"/pkg{a}/sub{b}/x/y/z/m{i}.py" for a in range(10) for b in range(10) for i in range(40)]


def make(root):
    for p in paths():
        os.makedirs(os.path.dirname(root + p), exist_ok=True)
        with open(root + p, "w") as f:
            f.write("x = 1\n")


def time_calls(root):
    here = [root + p for p in paths()]
    missing = [p + ".missing" for p in here] + [os.path.dirname(p) + "/nope/x.py" for p in here]
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for p in here:
            os.stat(p)
        for p in missing:
            try:
                os.stat(p)
            except FileNotFoundError:
                pass
        best = min(best or 1e9, time.perf_counter() - t)
    n = len(here) + len(missing)
    print(f"{n} stats ({len(missing)} missing): best {best * 1e6 / n:.2f} us/call")


if __name__ == "__main__":
    (make if sys.argv[1] == "make" else time_calls)(sys.argv[2])
