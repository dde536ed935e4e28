"""Prefetch cases: `fanstore prefetch` (a list of paths), the pure-Python sampler wrapper under a PyTorch
DataLoader for two epochs, and `fanstore-train` hinting its own shuffled order. The daemon's counters show what
the hints did: every remote file crossed MPI once, readers found it fetched ahead (or joined the fetch)."""
import json
import os
import re
import select
import socket
import struct
import subprocess

from cases_basic import source_md5s, torch_or_skip
from mpi_harness import Job, check, counters, log

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_TOOLS = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "python"))

HINTED_LOADER = r'''
import hashlib, json, os, sys
import torch
from torch.utils.data import DataLoader, RandomSampler
from torchvision.datasets import DatasetFolder
from fanstore_prefetch import HintingSampler, paths_of

def load(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()

if __name__ == "__main__":
    root = sys.argv[1]
    ds = DatasetFolder(root, loader=load, extensions=(".bin",))
    class Remember(HintingSampler):  # keeps the epoch's order, to match samples to files
        def __iter__(self):
            it = super().__iter__()
            self.order = list(it)
            return iter(self.order)
    sampler = Remember(RandomSampler(ds, generator=torch.Generator().manual_seed(0)), paths_of(ds))
    loader = DataLoader(ds, sampler=sampler, batch_size=4, num_workers=2, collate_fn=lambda b: b)
    # Each sample is (md5 of the file read by a worker, class); the sampler's order says which file it was.
    epochs = []
    for epoch in range(2):
        got = [md5 for batch in loader for md5, _ in batch]
        files = {os.path.relpath(ds.samples[i][0], root): got[k] for k, i in enumerate(sampler.order)}
        epochs.append({"hint": sampler.last, "files": files})
    print(json.dumps(epochs))
'''


def case_prefetch(ctx):
    ctx.pack(parts=4, nfiles=160, sizes=(50000, 131072, 300000))
    # --cache-prefault: the cache's memory is faulted in before "ready" (rank 0 says so); the prefetch
    # below then lands in memory that already holds pages.
    job = Job(ctx, 2, "--cache-bytes", str(256 << 20), "--cache-prefault")
    job.wait_ready()
    check(re.search(r"rank 0\]: fetch cache: 256 MiB faulted in", job.output()), "rank 0 did not fault its cache in")
    # 1. The CLI: every file of the tree, a replicated (local) one, one not in the image, a directory, one outside
    # the mount.
    paths = []
    for d, _, files in os.walk(os.path.join(ctx.src, "train")):
        paths += ["/fanstore/" + os.path.relpath(os.path.join(d, f), ctx.src) for f in sorted(files)]
    paths += ["val/" + sorted(os.listdir(os.path.join(ctx.src, "val")))[0], "train/none.bin", "train", "/elsewhere/x.bin"]
    lst = os.path.join(ctx.work, "list.txt")
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    r = subprocess.run([ctx.args.fanstore, "prefetch", "--daemon", ctx.sock(0), lst], capture_output=True, text=True,
                       env=ctx.env, timeout=60)
    log(f"fanstore prefetch -> rc {r.returncode}: {r.stdout.strip()} {r.stderr.strip()}")
    check(r.returncode == 0, "fanstore prefetch failed")
    m = re.search(r"(\d+) remote files .* (\d+) on this node, (\d+) not files of the image \(missing, directories, symlinks\), (\d+) outside", r.stdout)
    check(m, "unexpected output")
    remote, local, missing, outside = (int(x) for x in m.groups())
    check(missing == 2 and outside == 1 and local >= 1 and remote > 0, "wrong counts")
    res = ctx.run_check(0, "--which", "remote", "--threads", "2")
    check(res.returncode == 0, "reading after the hint failed")
    job.stop()
    c = counters(job.output(), 0)
    log(f"rank 0 daemon: {c}")
    # The reader may overtake the prefetcher on a busy machine (it then fetches the file itself and the prefetcher
    # skips it): each file still crosses MPI once, and every file fetched ahead is used.
    check(c["peer fetches"] == remote, "each remote file must have crossed MPI once")
    # How many it got to first depends on the scheduler (a busy rank 1 lets the reader overtake it): some, not most.
    check(c["prefetched"] > 0, f"the daemon must have fetched some of the {remote} hinted files ahead")
    check(c["prefetch hits"] == c["prefetched"], "every file fetched ahead must have been read from the cache")

    # 2. The Python sampler wrapper: two epochs through a DataLoader with forked workers.
    if torch_or_skip(ctx):
        job = Job(ctx, 2, "--cache-bytes", str(256 << 20))
        job.wait_ready()
        script = os.path.join(ctx.work, "hinted.py")
        with open(script, "w") as f:
            f.write(HINTED_LOADER)
        env = dict(ctx.env, PYTHONPATH=PYTHON_TOOLS)
        r = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--",
                            ctx.args.python, script, "/fanstore/train"], capture_output=True, text=True, env=env,
                           timeout=300)
        check(r.returncode == 0, f"the hinted DataLoader failed (rc {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
        epochs = json.loads(r.stdout.strip().splitlines()[-1])
        want = source_md5s(os.path.join(ctx.src, "train"))
        for e in epochs:
            check(e["files"] == want, "bytes through the hinted DataLoader differ from the source")
        hint = epochs[0]["hint"]
        log(f"epoch hints: {[e['hint'] for e in epochs]}")
        check(hint and hint["remote"] > 0 and hint["missing"] == 0 and hint["outside"] == 0,
              "the sampler's hint must name the dataset's files")
        job.stop()
        c = counters(job.output(), 0)
        log(f"rank 0 daemon: {c}")
        check(c["peer fetches"] == hint["remote"], "over two epochs each remote file must cross MPI once")
        check(c["prefetch hits"] > 0, "the DataLoader must have found files fetched ahead")
    # 3. fanstore-train hints its own shuffled order (per rank), reaching its daemon through a "{node}" socket
    #    template in FANSTORE_DAEMON (set by hand, as a job script with LD_PRELOAD would) like every client.
    if ctx.args.train and os.path.exists(ctx.args.train):
        datagen = os.path.join(os.path.dirname(ctx.args.train), "fanstore-datagen")
        tree = os.path.join(ctx.work, "imgs")
        r = subprocess.run([datagen, "imagefolder", "-o", tree, "--samples", "24", "--classes", "2", "--size", "32"],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, r.stderr)
        img = os.path.join(ctx.work, "img-train")
        r = subprocess.run([ctx.args.fanstore, "pack", tree, "-o", img, "--parts", "4"], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0, r.stderr)
        job = Job(ctx, 2, image=img, local=os.path.join(ctx.work, "tnode{rank}"))
        sock = os.path.join(ctx.work, "tnode0", "fanstore.sock")
        job.wait_ready(socks=[sock, os.path.join(ctx.work, "tnode1", "fanstore.sock")])
        template = os.path.join(ctx.work, "{node}", "fanstore.sock")
        r = subprocess.run([ctx.args.fanstore, "run", "--daemon", sock, "--", "env", "FANSTORE_DAEMON=" + template,
                            "SLURMD_NODENAME=tnode0", ctx.args.train, "--model", "resnet50",
                            "--data", "/fanstore/train", "--input-size", "32", "--batch", "2", "--max-steps", "1",
                            "--threads", "1", "--checkpoint", os.path.join(ctx.work, "ck")],
                           capture_output=True, text=True, env=ctx.env, timeout=300)
        check(r.returncode == 0, f"fanstore-train through the daemon failed:\n{r.stderr[-3000:]}")
        job.stop()
        c = counters(job.output(), 0)
        log(f"rank 0 daemon after fanstore-train: {c}")
        check(c["prefetched"] > 0, "fanstore-train must have hinted its epoch order")
    else:
        log("fanstore-train not built: its hint is not exercised")


def hint_socket(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock_path)
    return s


def raw_hint(s, req_id, stream, paths, append):
    """One prefetch request on socket `s`; returns (code, message, counts or None)."""
    body = "".join(p + "\n" for p in paths).encode()
    s.sendall(struct.pack("<IHHQQIIQQ", 0x51445346, 2, 3, req_id, stream, 1 if append else 0, 0, 0, len(body)) + body)
    head = b""
    while len(head) < 48:
        chunk = s.recv(48 - len(head))
        check(chunk, "the daemon closed the connection")
        head += chunk
    magic, _, _, rid, code, msg_len, size, _, _, _ = struct.unpack("<IHHQIIQIIQ", head)
    check(magic == 0x52445346 and rid == req_id, "malformed reply")
    rest = b""
    while len(rest) < msg_len + size:
        rest += s.recv(msg_len + size - len(rest))
    return code, rest[:msg_len].decode(errors="replace"), rest[msg_len:] if size else None


def partition_of(ctx, rel):
    r = subprocess.run([ctx.args.fanstore, "stat", ctx.img, rel], capture_output=True, text=True, timeout=30)
    m = re.search(r"part: (\d+)", r.stdout)
    check(m, f"fanstore stat {rel}: {r.stdout} {r.stderr}")
    return int(m.group(1))


def case_prefetch_limits(ctx):
    """Hints are bounded and cannot starve each other: (1) a client appending to its hint forever is refused once
    the daemon holds 4x the image's files for it (it used to keep every path: unbounded memory); (2) a stream
    whose reader went away (never read a file of its hint) holds the prefetch window only until another stream is
    being read: then it yields (--prefetch-idle), and the new reader finds its files fetched ahead (it used to get
    no prefetch at all for the rest of the daemons' life)."""
    ctx.pack(parts=8, nfiles=120, sizes=(131072, 300000))
    # (Sizes with units, as in the docs' examples: they were refused with "Could not convert".)
    job = Job(ctx, 4, "--cache-bytes", "64M", "--prefetch-window", "1MiB", "--prefetch-idle", "1")
    job.wait_ready()
    files = []
    for d, _, names in os.walk(os.path.join(ctx.src, "train")):
        files += [os.path.relpath(os.path.join(d, n), ctx.src) for n in sorted(names)]
    owner = {f: partition_of(ctx, f) % 4 for f in sorted(files)}
    of = lambda r: [f for f in sorted(files) if owner[f] == r]  # noqa: E731
    # (1) Appends without end.
    s = hint_socket(ctx.sock(0))
    code, msg, _ = raw_hint(s, 2, 77, files, False)
    check(code == 0, f"the first hint must be taken: {msg}")
    refused = None
    for i in range(200):
        code, msg, _ = raw_hint(s, 3 + i, 77, files, True)
        if code != 0:
            refused = (i, code, msg)
            break
    s.close()
    log(f"appending {len(files)} paths at a time: {refused}")
    check(refused and "too long" in refused[2],
          "appending to a hint without end must be refused with the reason (the daemon kept every path)")
    # Replaced by a short one (a new hint of the same stream is always fine), so it holds nothing here.
    s = hint_socket(ctx.sock(0))
    check(raw_hint(s, 2, 77, of(0)[:1], False)[0] == 0, "a replacing hint must be taken")
    s.close()
    # (2) Stream 1 hints rank 1's files and never reads them: they fill the 1 MiB window.
    s = hint_socket(ctx.sock(0))
    check(raw_hint(s, 2, 1, of(1), False)[0] == 0, "hint of stream 1")
    s.close()
    select.select([], [], [], 2.0)  # stream 1 idle for twice --prefetch-idle
    lst = os.path.join(ctx.work, "rank2.txt")
    with open(lst, "w") as f:
        f.write("\n".join(of(2)) + "\n")
    r = subprocess.run([ctx.args.fanstore, "prefetch", "--daemon", ctx.sock(0), "--stream", "2", lst],
                       capture_output=True, text=True, env=ctx.env, timeout=60)
    log(f"stream 2: {r.stdout.strip()} {r.stderr.strip()}")
    check(r.returncode == 0, "fanstore prefetch failed")
    res = ctx.run_check(0, "--owner-rank", "2", "--nranks", "4")
    check(res.returncode == 0, "reading rank 2's files failed")
    job.stop()
    c = counters(job.output(), 0)
    log(f"rank 0 daemon: {c}")
    check(c["prefetch hits"] > 0, "the reader of stream 2 found nothing fetched ahead: the window stayed with stream 1, "
                                  "whose reader never read")
