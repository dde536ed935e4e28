#!/usr/bin/python3
"""Turns bench.sh's raw measurements into results.csv (one comparison per line), results.md and plot data.

Input raw.csv columns: section,case,system,unit,better,value  (better: higher|lower; value: a number, or the
reason it is missing, e.g. "n/a (not built)"). notes.tsv: section<TAB>note lines printed under each table.
Every verdict compares two systems measured in the same run; a ratio is always shown, whichever side wins.
"""
import argparse
import csv
import os
import subprocess
import sys

# Per section: title, columns in display order, and the (contender, baseline) pairs that get a verdict.
SECTIONS = [
    ("micro", "Metadata and small-file I/O (one thread, warm page cache)",
     ["fanstore-raw", "fanstore-zstd", "fuse", "tmpfs", "disk"],
     [("fanstore-raw", "tmpfs"), ("fanstore-raw", "disk"), ("fanstore-zstd", "tmpfs"), ("fuse", "tmpfs")]),
    ("microbench", "Micro-benchmarks of the hot paths (fanstore-microbench, Google Benchmark, one thread)",
     ["microbench-fanstore", "microbench-baseline"],
     [("microbench-fanstore", "microbench-baseline")]),
    ("loader", "PyTorch data-loader epoch (ImageFolder + DataLoader, num_workers=2)",
     ["fanstore", "fuse", "tmpfs", "disk"],
     [("fanstore", "tmpfs"), ("fanstore", "disk"), ("fuse", "tmpfs")]),
    ("dlio", "DLIO-style MLPerf Storage emulation (one emulated accelerator)",
     ["fanstore", "fuse", "tmpfs", "disk"],
     [("fanstore", "tmpfs"), ("fanstore", "disk"), ("fuse", "tmpfs")]),
    ("remote", "Remote reads: 4 daemons on one machine (shared memory) vs an MPI ping-pong",
     ["fanstore-daemon", "fanstore-fetch", "fanstore-local", "mpi-pingpong"],
     [("fanstore-daemon", "mpi-pingpong"), ("fanstore-fetch", "mpi-pingpong"), ("fanstore-daemon", "fanstore-local")]),
    ("remote-tcp", "Remote reads across 4 network namespaces: Open MPI over TCP on veths",
     ["fanstore-daemon", "fanstore-fetch", "mpi-pingpong"],
     [("fanstore-daemon", "mpi-pingpong"), ("fanstore-fetch", "mpi-pingpong")]),
    ("prefetch", "DataLoader epoch on 4 daemons, 3/4 of the files remote, vs a local image",
     ["fanstore-hinted", "fanstore-prefault", "fanstore-daemon", "fanstore-local"],
     [("fanstore-hinted", "fanstore-local"), ("fanstore-prefault", "fanstore-local"),
      ("fanstore-daemon", "fanstore-local")]),
    ("daemon", "The daemon: idle CPU, and a peer killed under a 1,000-file read",
     ["fanstore-daemon", "fanstore-progress", "normal"],
     [("fanstore-daemon", "normal")]),
    ("largefile", "Large files and index start-up: chunked reads, one decoded copy per node",
     ["fanstore-zstd", "fanstore-raw", "tmpfs", "disk", "zstd-cli", "fanstore-untrusted", "mapped-v1"],
     [("fanstore-zstd", "tmpfs"), ("fanstore-raw", "tmpfs"), ("fanstore-zstd", "zstd-cli"), ("fanstore-zstd", "disk"),
      ("fanstore-zstd", "fanstore-untrusted"), ("fanstore-raw", "mapped-v1")]),
    ("pack", "Packing a dataset: fanstore pack vs tar | zstd",
     ["fanstore-pack", "tar-zstd", "tar"],
     [("fanstore-pack", "tar-zstd"), ("fanstore-pack", "tar")]),
    ("asyncio", "fio engines and a static program through fanstore run",
     ["fanstore-raw", "fanstore-zstd", "tmpfs"],
     [("fanstore-raw", "tmpfs"), ("fanstore-zstd", "tmpfs")]),
    ("trainer", "Trainer vs PyTorch 1.13 on CPU (same batch, input size, threads)",
     ["fanstore-train", "pytorch"],
     [("fanstore-train", "pytorch")]),
    ("gpu", "Trainer on one GPU (bench.sh --gpu: bf16, channels-last) vs its goals per H100",
     ["fanstore-train-gpu", "goal"],
     [("fanstore-train-gpu", "goal")]),
    ("spatial", "Sample x spatial grids (CosmoFlow; U-Net too for --grid auto): memory, a memory cap, scaling, --grid auto",
     ["spatial", "one-rank", "data-parallel", "predicted", "model-choice", "measured-best"],
     [("spatial", "one-rank"), ("spatial", "data-parallel"), ("spatial", "predicted"),
      ("model-choice", "measured-best")]),
    ("ltfb", "Tournament training (LTFB): samples and wall time to a target score, K trainers vs one",
     ["ltfb-k", "one-trainer"],
     [("ltfb-k", "one-trainer")]),
    ("staging", "Staging on 4 nodes from a network file system (sshfs): first read, bytes read, time to staged",
     ["fanstore", "strict", "cp"],
     [("fanstore", "cp"), ("fanstore", "strict")]),
    ("remote-cost", "What remote reads cost: wall and CPU seconds per 1,000 remote files, each daemon mechanism on and off",
     ["default", "no-doorbell", "no-mapped", "alt"],
     [("no-doorbell", "default"), ("no-mapped", "default"), ("alt", "default")]),
    ("env", "A Python environment from an image: 16 processes importing torch, pack time and size vs SquashFS",
     ["fanstore-run", "fuse", "squashfuse", "squashfs", "disk", "fanstore-pack", "mksquashfs"],
     [("fanstore-run", "disk"), ("fanstore-run", "squashfuse"), ("fanstore-run", "squashfs"), ("fuse", "disk"),
      ("fanstore-pack", "mksquashfs")]),
]

HEADINGS = {
    "fanstore-raw": "FanStore raw", "fanstore-zstd": "FanStore zstd", "fuse": "FanStore FUSE", "tmpfs": "tmpfs",
    "disk": "disk (ext4)", "fanstore": "FanStore", "fanstore-daemon": "FanStore via daemon",
    "fanstore-local": "FanStore local image", "mpi-pingpong": "MPI ping-pong", "fanstore-pack": "fanstore pack",
    "tar-zstd": "tar + zstd -T2", "tar": "tar (no compression)", "fanstore-train": "fanstore-train",
    "pytorch": "PyTorch 1.13", "fanstore-fetch": "daemon fetch", "fanstore-hinted": "daemons + hints",
    "fanstore-prefault": "hints + --cache-prefault",
    "fanstore-progress": "--progress", "normal": "before the kill",
    "microbench-fanstore": "FanStore path", "microbench-baseline": "baseline",
    "zstd-cli": "zstd -d -T0", "fanstore-untrusted": "FanStore, index re-hashed",
    "mapped-v1": "mapping verified once (format 1)",
    "strict": "--strict-staging", "cp": "cp per node",
    "fanstore-train-gpu": "fanstore-train (GPU)", "goal": "goal",
    "spatial": "grid", "one-rank": "one rank", "data-parallel": "data parallel",
    "predicted": "model's prediction", "model-choice": "model's choice", "measured-best": "measured best",
    "ltfb-k": "K trainers", "one-trainer": "one trainer",
    "fanstore-run": "fanstore run", "squashfuse": "squashfuse", "squashfs": "kernel squashfs",
    "mksquashfs": "mksquashfs",
    "default": "default", "no-doorbell": "--no-doorbell", "no-mapped": "--mapped-send-min 0", "alt": "COST_ALT build",
}
# The subject of a verdict sentence ("FanStore 3.2x faster").
SUBJECT = {
    "fanstore-raw": "FanStore", "fanstore-zstd": "FanStore zstd", "fuse": "FUSE", "fanstore": "FanStore",
    "fanstore-daemon": "FanStore remote", "fanstore-fetch": "daemon fetch", "fanstore-hinted": "FanStore + hints",
    "fanstore-prefault": "FanStore + hints + prefault",
    "fanstore-pack": "fanstore pack", "fanstore-train": "fanstore-train",
    "microbench-fanstore": "FanStore",
    "fanstore-train-gpu": "fanstore-train (GPU)", "spatial": "grid", "model-choice": "model's choice",
    "ltfb-k": "K trainers", "fanstore-run": "fanstore run",
    "no-doorbell": "without doorbells", "no-mapped": "without mapped sends", "alt": "COST_ALT build",
}


def number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v):
    x = number(v)
    if x is None:
        return v if v else "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def verdict(row, contender, baseline):
    """Returns (speedup or None, sentence). speedup > 1 means the contender is faster / better."""
    a, b = row.get(contender), row.get(baseline)
    if a is None or b is None:
        return None, "-"
    xa, xb = number(a), number(b)
    if xa is None:
        return None, a
    if xb is None:
        return None, f"n/a (baseline: {b})"
    if xa <= 0 or xb <= 0:
        return None, "n/a (zero)"
    speedup = xa / xb if row["better"] == "higher" else xb / xa
    if baseline == "predicted":  # a model's prediction: how far off it is, not who wins
        return speedup, f"measured = {xa / xb:.2f}x predicted"
    good, bad = ("higher", "lower") if row["unit"].startswith("%") else ("faster", "slower")
    if row["unit"] in ("MiB", "bytes"):
        good, bad = "smaller", "larger"
    if row["unit"] == "samples":
        good, bad = "fewer", "more"
    if row["unit"] == "x image":
        good, bad = "fewer bytes", "more bytes"
    who = SUBJECT.get(contender, contender)
    # Utilisation is a percentage already: say the gap in points as well as the ratio.
    pts = f" ({xa - xb:+.1f} pts)" if row["unit"].startswith("%") else ""
    if speedup >= 1:
        return speedup, f"{who} {speedup:.2f}x {good}{pts}"
    return speedup, f"{who} {1 / speedup:.2f}x {bad}{pts}"


def load(raw_path):
    """Groups raw rows into {section: [row dict keyed by system, in first-seen case order]}."""
    sections = {}
    with open(raw_path, newline="") as f:
        for r in csv.DictReader(f):
            cases = sections.setdefault(r["section"], {})
            row = cases.setdefault(r["case"], {"case": r["case"], "unit": r["unit"], "better": r["better"]})
            row[r["system"]] = r["value"]
    return {s: list(c.values()) for s, c in sections.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="bench-results directory holding raw.csv (and notes.tsv)")
    p.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.gp"))
    a = p.parse_args()
    data = load(os.path.join(a.dir, "raw.csv"))
    notes = {}
    notes_path = os.path.join(a.dir, "notes.tsv")
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            for line in f:
                if "\t" in line:
                    s, n = line.rstrip("\n").split("\t", 1)
                    notes.setdefault(s, []).append(n)

    md, out_rows = [], []
    for key, title, systems, pairs in SECTIONS:
        rows = data.get(key)
        if not rows:
            continue
        present = [s for s in systems if any(s in r for r in rows)]
        used_pairs = [(c, b) for c, b in pairs if c in present and b in present]
        md.append(f"### {title}\n")
        head = ["Case", "Unit"] + [HEADINGS.get(s, s) for s in present] + \
               [f"{HEADINGS.get(c, c)} vs {HEADINGS.get(b, b)}" for c, b in used_pairs]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "|".join(["---"] * 2 + ["--:"] * len(present) + ["---"] * len(used_pairs)) + "|")
        plot_rows = []
        for r in rows:
            cells = [r["case"], r["unit"]] + [fmt(r.get(s)) for s in present]
            speedups = []
            for c, b in used_pairs:
                sp, text = verdict(r, c, b)
                cells.append(text)
                speedups.append(sp)
                if r.get(c) is not None and r.get(b) is not None:
                    out_rows.append([key, r["case"], r["unit"], r["better"], c, r[c], b, r[b],
                                     f"{sp:.4f}" if sp else "", text])
            md.append("| " + " | ".join(cells) + " |")
            plot_rows.append((r["case"], speedups))
        for n in notes.get(key, []):
            md.append(f"\n{n}")
        md.append("")
        write_plot(a, key, title, used_pairs, plot_rows)

    with open(os.path.join(a.dir, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "case", "unit", "better", "system", "value", "baseline", "baseline_value",
                    "speedup", "verdict"])
        w.writerows(out_rows)
    text = "\n".join(md)
    with open(os.path.join(a.dir, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def write_plot(a, key, title, pairs, plot_rows):
    """One PNG per section: speedup of each contender over each baseline (log scale, 1 = parity)."""
    # gnuplot rejects a column with no valid point: plot only the comparisons that have at least one.
    keep = [i for i in range(len(pairs)) if any(sps[i] for _, sps in plot_rows)]
    if not keep:
        return
    pairs = [pairs[i] for i in keep]
    plot_rows = [(case, [sps[i] for i in keep]) for case, sps in plot_rows]
    dat = os.path.join(a.dir, f"{key}.dat")
    with open(dat, "w") as f:
        f.write('"case"\t' + "\t".join(f'"{SUBJECT.get(c, c)} vs {HEADINGS.get(b, b)}"' for c, b in pairs) + "\n")
        for case, sps in plot_rows:
            f.write(f'"{case}"\t' + "\t".join(f"{sp:.4f}" if sp else "?" for sp in sps) + "\n")
    png = os.path.join(a.dir, f"{key}.png")
    cmd = ["gnuplot", "-e", f"datafile='{dat}'; outfile='{png}'; plottitle='{title}'; ncols={len(pairs) + 1}",
           a.plot]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"report: plot {png} failed: {getattr(e, 'stderr', e)}", file=sys.stderr)


if __name__ == "__main__":
    main()
