#!/usr/bin/python3
"""Turns fanstore-microbench's JSON (PREFIX.core.json, PREFIX.interpose.json) into bench.sh rows, one per comparison.

Prints "case<TAB>system<TAB>unit<TAB>better<TAB>value" lines (system: microbench-fanstore or microbench-baseline). With --check, prints
nothing and fails (exit 1, one line per problem) when a benchmark a row needs is missing or reported an error.
"""
import argparse
import json
import sys

# (case: the FanStore path "vs" the baseline it is compared with; unit; FanStore benchmark; baseline benchmark)
ROWS = [
    ("path lookup: Image::Lookup vs stat(2) on tmpfs", "ns/op", "core/Image::Lookup", "tmpfs/stat"),
    ("stat data: Client::Lookup + FillStat vs stat(2) on tmpfs", "ns/op", "core/Client::Lookup+FillStat", "tmpfs/stat"),
    ("decode 4 KiB zstd: Image::ReadFile vs open+read+close on tmpfs", "ns/op",
     "core/Image::ReadFile zstd 4KiB", "tmpfs/read 4KiB"),
    ("decode 128 KiB zstd: Image::ReadFile vs open+read+close on tmpfs", "MiB/s",
     "core/Image::ReadFile zstd 128KiB", "tmpfs/read 128KiB"),
    ("decode 4 MiB zstd: Image::ReadFile vs open+read+close on tmpfs", "MiB/s",
     "core/Image::ReadFile zstd 4MiB", "tmpfs/read 4MiB"),
    ("checksum 128 KiB raw: Image::ReadFile (pread + XXH3) vs open+read+close on tmpfs", "MiB/s",
     "core/Image::ReadFile raw 128KiB", "tmpfs/read 128KiB"),
    ("XXH3-64 of 128 KiB vs memcpy of 128 KiB", "MiB/s", "core/XXH3 128KiB", "core/memcpy 128KiB"),
    ("cache miss 128 KiB: Client::Load, cache off vs open+read+close on tmpfs", "MiB/s",
     "core/Client::Load uncached zstd 128KiB", "tmpfs/read 128KiB"),
    ("cache hit 128 KiB: Client::Load (no copy) vs open+read+close on tmpfs", "ns/op",
     "core/Client::Load cached zstd 128KiB", "tmpfs/read 128KiB"),
    ("stat: interposer vs tmpfs", "ns/op", "interpose/stat", "tmpfs/stat"),
    ("open+close: interposer vs tmpfs", "ns/op", "interpose/open+close", "tmpfs/open+close"),
    ("open+read+close 4 KiB: interposer (cached) vs tmpfs", "ns/op", "interpose/read 4KiB", "tmpfs/read 4KiB"),
    ("open+read+close 128 KiB: interposer (cached) vs tmpfs", "MiB/s", "interpose/read 128KiB", "tmpfs/read 128KiB"),
    ("open+read+close 4 MiB: interposer (cached) vs tmpfs", "MiB/s", "interpose/read 4MiB", "tmpfs/read 4MiB"),
    ("stat outside the mount: under the preload vs without it", "ns/op", "passthrough/stat", "tmpfs/stat"),
    ("open+read+close 4 KiB outside the mount: under the preload vs without it", "ns/op",
     "passthrough/read 4KiB", "tmpfs/read 4KiB"),
]


def load(prefix):
    """Benchmark name -> its result: the median when the run had --benchmark_repetitions, else the one run."""
    runs = {}
    for part in ("core", "interpose"):
        try:
            with open(f"{prefix}.{part}.json") as f:
                for b in json.load(f).get("benchmarks", []):
                    name = b.get("run_name", b["name"])
                    if b.get("run_type") == "aggregate":
                        if b.get("aggregate_name") == "median":
                            runs[name] = b
                    elif name not in runs:
                        runs[name] = b
        except (OSError, ValueError) as e:
            runs.setdefault("__errors__", []).append(f"{prefix}.{part}.json: {e}")
    return runs


def value(b, unit):
    """The benchmark's figure in `unit`, or the reason there is none."""
    if b is None:
        return "error (not run)"
    if b.get("error_occurred"):
        return f"error ({b.get('error_message', '?')})"
    if unit == "ns/op":
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        return f"{b['real_time'] * scale:.1f}"
    return f"{b['bytes_per_second'] / 2**20:.1f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("prefix", help="the --json PREFIX given to fanstore-microbench")
    p.add_argument("--check", action="store_true", help="only check that every row's benchmarks ran without error")
    p.add_argument("--missing", metavar="REASON", help="print every row with REASON as its value (nothing was run)")
    a = p.parse_args()
    runs = {} if a.missing else load(a.prefix)
    problems = list(runs.pop("__errors__", []))
    for case, unit, ours, base in ROWS:
        for system, name in (("microbench-fanstore", ours), ("microbench-baseline", base)):
            v = a.missing if a.missing else value(runs.get(name), unit)
            if v.startswith("error"):
                problems.append(f"{name}: {v}")
            if not a.check:
                better = "lower" if unit == "ns/op" else "higher"
                print(f"{case}\t{system}\t{unit}\t{better}\t{v}")
    if a.check:
        for line in sorted(set(problems)):
            print(f"FAIL {line}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
