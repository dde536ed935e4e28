"""Basic daemon cases: staging layout and reads from every rank, replicas and failover, staging errors, a PyTorch
DataLoader through `fanstore run --daemon`, and one transfer for many readers of one file (the fetch cache)."""
import json
import hashlib
import os
import re
import subprocess
import sys
import time

from mpi_harness import Job, SKIP, check, counters, log, mapped_sends_possible, parts_of
import daemon_cpu  # noqa: E402  (scripts/bench, on the path mpi_harness set)


def case_read_all(ctx):
    ctx.pack(parts=8)
    job = Job(ctx, 4)
    job.wait_ready()
    for r in range(4):
        got = parts_of(ctx.node(r))
        want = sorted([f"part-{i:05d}.fsp" for i in range(8) if i % 4 == r] + ["part-rep.fsp"])
        check(got == want, f"rank {r} staged {got}, expected {want}")
    w = subprocess.run([ctx.args.fanstore, "wait", os.path.join(ctx.work, "nobody.sock"), "--timeout", "0.3"],
                       capture_output=True, text=True)
    check(w.returncode == 1 and "not ready" in w.stderr, f"fanstore wait on a missing socket: {w.returncode} {w.stderr}")
    # --timeout 0 asks once (it never asked); a path that cannot become the socket fails at once, not at the timeout.
    w = subprocess.run([ctx.args.fanstore, "wait", ctx.sock(0), "--timeout", "0"], capture_output=True, text=True)
    check(w.returncode == 0, f"fanstore wait --timeout 0 on a ready daemon: {w.returncode} {w.stderr}")
    t0 = time.monotonic()
    w = subprocess.run([ctx.args.fanstore, "wait", ctx.work, "--timeout", "60"], capture_output=True, text=True)
    check(w.returncode == 1 and f"{ctx.work} is a directory: give the --socket path" in w.stderr
          and time.monotonic() - t0 < 30, f"fanstore wait on a directory: {w.returncode} {w.stderr}")
    r = ctx.run_check(0, "--which", "all")
    check(r.returncode == 0, "reading every file through rank 0 failed")
    m = re.search(r"\((\d+) local, (\d+) remote\)", r.stdout)
    check(m and int(m.group(2)) > int(m.group(1)), "expected most files to be remote")
    ctx.check_all(range(4), "--threads", "2", what="a concurrent client failed", timeout=120)
    job.stop()
    out = job.output()
    log("daemon exit lines:\n" + "\n".join(l for l in out.splitlines() if "stopping on" in l))
    check(len(re.findall(r"fanstore serve\[rank \d\]: stopping on .*served \d+ client requests", out)) == 4,
          "expected one exit line per rank:\n" + out)
    for r in range(4):
        check(not os.path.exists(ctx.sock(r)), f"socket of rank {r} left behind")
        check(parts_of(ctx.node(r)), "staged data removed without --cleanup")
        # Every rank asked others and answered others: it rang their doorbells and heard its own.
        c = counters(out, r)
        check(c and c["doorbells rung"] > 0 and c["doorbells heard"] > 0, f"rank {r} doorbells: {c}")
    # Ranges of 64 KiB or more (the tree's raw 131,072- and 300,000-byte files) went straight from the owners'
    # mappings, where the staging directory is node-local and leases work (else every range is pread: said why).
    mapped = sum(counters(out, r)["sent from mappings"] for r in range(4))
    if mapped_sends_possible(ctx):
        check(mapped > 0, "no range was sent from a mapping")
    else:
        log("not checking mapped sends: no leases, or staging on a file system without them")
    log(f"ranges sent from mappings: {mapped}")


def case_no_doorbell(ctx):
    # Without doorbells a peer finds requests at its next look at MPI: slower, never wrong or stuck.
    ctx.pack(parts=8)
    job = Job(ctx, 4, "--no-doorbell", "--cache-bytes", "0")
    job.wait_ready()
    r = ctx.run_check(0, "--threads", "2")
    check(r.returncode == 0, "reading every file through rank 0 without doorbells failed")
    # With --cache-bytes 0 there is no prefetch: a hint is refused, saying why (it claimed the files were queued).
    lst = os.path.join(ctx.work, "hint.txt")
    with open(lst, "w") as f:
        for d, _, files in os.walk(ctx.src):
            f.writelines(os.path.relpath(os.path.join(d, name), ctx.src) + "\n" for name in files)
    p = subprocess.run([ctx.args.fanstore, "prefetch", "--daemon", ctx.sock(0), lst], capture_output=True, text=True,
                       env=ctx.env, timeout=60)
    check(p.returncode == 1 and "prefetch is off: this daemon runs with --cache-bytes 0" in p.stderr,
          f"a hint to a daemon without a fetch cache: rc {p.returncode}: {p.stdout} {p.stderr}")
    job.stop()
    out = job.output()
    for rank in range(4):
        c = counters(out, rank)
        check(c and c["doorbells rung"] == 0 and c["doorbells heard"] == 0, f"rank {rank} doorbells: {c}")


def case_transport_options(ctx):
    """The transport's switches, each visible and none changing a byte: --mapped-send-min 0 (every range is read
    into a send buffer, none sent from a mapping), --progress (the daemons never sleep: a busy core each while
    idle) and --conn-memory 1 MiB (4 MiB chunks, so replies of 1.5-3 MiB outgrow a connection's reply area and
    travel in memfds of their own, counted in the exit line)."""
    ctx.pack(parts=8, chunk="4M", nfiles=40, sizes=(4096, 131072, 1500000, 3000000))
    job = Job(ctx, 4, "--mapped-send-min", "0", "--progress", "--conn-memory", str(1 << 20), "--cache-bytes", "0")
    job.wait_ready()
    idle = daemon_cpu.cpu_percent(list(job.pids().values()), 1.5)
    log(f"--progress, idle: {', '.join(f'{c:.0f}%' for c in idle)} of a core per daemon")
    # 4 spinning daemons on 2 cores get about 50% each; a sleeping one about 1% (docs/performance.md).
    check(sum(idle) / len(idle) > 10, f"--progress daemons must poll while idle: {idle}")
    ctx.check_all(range(4), "--which", "remote", "--threads", "3",
                  what="reading with --conn-memory 1 MiB and no mapped sends failed")
    job.stop()
    out = job.output()
    c = [counters(out, r) for r in range(4)]
    check(all(c) and all(x["errors"] == 0 for x in c), f"errors: {c}")
    check(sum(x["replies in memfds of their own"] for x in c) > 0, f"no reply outgrew --conn-memory 1 MiB: {c}")
    # Where mapped sends would happen (mpi_read_all checks they do), none may with --mapped-send-min 0.
    if mapped_sends_possible(ctx):
        check(sum(x["sent from mappings"] for x in c) == 0, f"ranges sent from mappings despite 0: {c}")
    else:
        log("mapped sends are off here anyway: --mapped-send-min 0 not observable")


def case_replicas(ctx):
    ctx.pack(parts=8)
    job = Job(ctx, 4, "--replicas", "2", "--timeout", "4", "--cleanup", "--cache-bytes", "0")
    job.wait_ready()
    for r in range(4):
        got = parts_of(ctx.node(r))
        want = sorted([f"part-{i:05d}.fsp" for i in range(8) if r in (i % 4, (i % 4 + 1) % 4)] + ["part-rep.fsp"])
        check(got == want, f"rank {r} staged {got}, expected {want}")
    # Lose rank 1's staged data: truncate (so even an open fd reads nothing) and delete. The daemon holds a read
    # lease on each (it sends ranges from their mappings): a truncation waits until it gives the lease back, at its
    # next step, never the kernel's lease-break time (45 s).
    for f in parts_of(ctx.node(1)):
        path = os.path.join(ctx.node(1), f)
        t0 = time.monotonic()
        os.truncate(path, 0)
        held = time.monotonic() - t0
        check(held < 10, f"truncating {f} was held {held:.1f} s: rank 1 did not give its lease back")
        os.unlink(path)
    log(f"removed rank 1's staged partitions; left: {parts_of(ctx.node(1))}")
    for rank in (0, 1, 2):
        r = ctx.run_check(rank, "--which", "all", "--threads", "2")
        check(r.returncode == 0, f"reads through rank {rank} failed after rank 1 lost its data")
    # Damage copies that stay in place: a byte flipped every 8 KiB in one of rank 2's partitions, one of rank 3's cut
    # in half. Readers on those nodes read them locally, the others get them from those ranks: every checksum that
    # fails sends the read to the image directory, and every file still reads right (it was EIO, and the message
    # blamed the image).
    flipped = os.path.join(ctx.node(2), parts_of(ctx.node(2))[0])
    with open(flipped, "r+b") as f:
        for off in range(4096, os.path.getsize(flipped), 8192):
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x55]))
    cut = os.path.join(ctx.node(3), parts_of(ctx.node(3))[0])
    os.truncate(cut, os.path.getsize(cut) // 2)
    log(f"flipped bytes in {flipped}, cut {cut} in half")
    for rank in (0, 2, 3):
        r = ctx.run_check(rank, "--which", "all", "--threads", "2")
        check(r.returncode == 0, f"reads through rank {rank} failed with damaged copies on ranks 2 and 3")
    job.stop()
    out = job.output()
    for rank in (2, 3):
        check(re.search(rf"rank {rank}\]: a client found bytes of partition \d+ damaged \(in this node's staged copy\): "
                        "such ranges are read from the other replicas, or the image directory", out),
              f"rank {rank} must say that a client found its copy damaged:\n" + out)
    log("daemon exit lines:\n" + "\n".join(l for l in out.splitlines() if "stopping on" in l))
    failovers = sum(int(x) for x in re.findall(r"(\d+) failovers", out))
    check(failovers > 0, "expected some reads to fail over to the second replica")
    check(re.search(r"rank 1\]: partition \d+'s staged copy is being written or truncated", out),
          "rank 1 must say that it stopped sending its truncated partitions from their mappings")
    for r in range(4):
        check(not os.path.exists(ctx.node(r)) or not parts_of(ctx.node(r)), f"--cleanup left data on rank {r}")
    # More replicas than ranks: the lines say the 2 that placement makes. A --timeout past a day (whose milliseconds
    # wrapped an int and failed every remote read) is refused in one line.
    job = Job(ctx, 2, "--replicas", "9", "--cleanup", "--cache-bytes", "0")
    job.wait_ready()
    job.stop()
    out = job.output()
    check("(2 replicas per partition)" in out and "2 replicas," in out, "--replicas 9 on 2 ranks must say 2:\n" + out)
    # Under 1 ms, whose milliseconds were 0, every remote range was read from the image directory ("no other rank
    # holds partition 1" while rank 1 held it).
    for t in ("1e9", "0.0004"):
        job = Job(ctx, 2, "--timeout", t)
        check(job.p.wait(timeout=60) != 0, f"--timeout {t} must be refused")
        check("--timeout must be from 0.001 (1 ms) to 86400 seconds (a day)" in job.output(), job.output())


def refused_job(ctx, np_, *extra, why, **kw):
    """A job that must stop at start-up: every one of its `np_` ranks exits non-zero. Returns its output."""
    job = Job(ctx, np_, *extra, wrap_exit=True, **kw)
    job.wait(120)
    out = job.output()
    log("output:\n" + out.strip())
    exits = dict(re.findall(r"rank (\d) exit (\d+)", out))
    check(len(exits) == np_ and all(v != "0" for v in exits.values()), f"every rank must exit non-zero {why}: {exits}")
    return out


def case_nospace(ctx):
    ctx.pack(parts=8)
    out = refused_job(ctx, 4, "--reserve", str(10 ** 18), why="without space")
    errs = re.findall(r"fanstore serve\[rank (\d)\]: no space: not enough space in \S+ for partition (part-\S+\.fsp): "
                      r"this rank needs (\d+) bytes", out)
    check(len(errs) == 4, "expected one space error per rank naming the partition and the bytes")
    check("staging failed on 4 rank(s) (their lines say why); every rank stops" in out,
          "rank 0, failed itself, must still say that every rank stops")
    check(len(re.findall(r"bytes free of which --reserve keeps \d+: free space there, give --local on a larger disk, "
                          r"lower --reserve, or run on more nodes", out)) == 4,
          "each no-space line must say what to do")

    # One rank fails alone (its --local is a regular file): every rank must still exit non-zero.
    for r in range(4):
        subprocess.run(["rm", "-rf", ctx.node(r)], check=True)
    open(ctx.node(2), "w").close()
    out = refused_job(ctx, 4, why="when one fails")
    check(re.search(r"fanstore serve\[rank 2\]: .*node2", out), "rank 2 must say what failed")
    check(re.search(r"failed on 1 rank\(s\)", out), "rank 0 must say another rank failed")
    os.unlink(ctx.node(2))

    # A --local whose parent is missing: says that serve makes only the last component (it said "mkdir ...: No such
    # file or directory").
    out = refused_job(ctx, 2, local=os.path.join(ctx.work, "no-parent", "node{rank}"), why="without --local's parent")
    check(len(re.findall(r"not found: --local \S+/no-parent/node\d: its parent directory does not exist \(serve makes "
                         r"only the last component\): create the parent", out)) == 2,
          "a --local without its parent:\n" + out)

    # Rank 2 is given another image: refused at start-up, before staging (it was served, and every read of its
    # partitions from another node failed as "outside" its file).
    other = os.path.join(ctx.work, "other-img")
    os.makedirs(os.path.join(ctx.work, "other-src"), exist_ok=True)
    with open(os.path.join(ctx.work, "other-src", "a"), "w") as f:
        f.write("another image\n")
    r = subprocess.run([ctx.args.fanstore, "pack", os.path.join(ctx.work, "other-src"), "-o", other, "--parts", "8"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"pack failed: {r.stderr}")
    swap = ("import os, sys\n"
            "a = [sys.argv[1] if x == sys.argv[2] and os.environ['OMPI_COMM_WORLD_RANK'] == '2' else x"
            " for x in sys.argv[3:]]\n"
            "os.execvp(a[0], a)\n")
    out = refused_job(ctx, 4, mpirun_extra=[sys.executable, "-c", swap, other, ctx.img],
                      why="when one serves another image")
    check(re.search(r"fanstore serve\[rank 2\]: invalid argument: --image \S+ is not the image rank 0 serves "
                    r"\(content key [0-9a-f]{16} here, [0-9a-f]{16} on rank 0\): give every rank the same image", out),
          "rank 2 must say that its image is not rank 0's")
    check("start-up failed on 1 rank(s)" in out, "rank 0 must say another rank failed")
    check(not any(os.path.exists(os.path.join(ctx.node(r), "index.fsi")) for r in range(4)),
          "nothing may be staged before the ranks agree on the image")


DATALOADER = r'''
import hashlib, json, os, sys
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets import DatasetFolder

def load(path):
    with open(path, "rb") as f:
        return f.read()

class Md5(Dataset):
    def __init__(self, root):
        self.inner = DatasetFolder(root, loader=load, extensions=(".bin",))
    def __len__(self):
        return len(self.inner)
    def __getitem__(self, i):
        data, target = self.inner[i]
        return os.path.relpath(self.inner.samples[i][0], sys.argv[1]), hashlib.md5(data).hexdigest(), os.getpid()

def collate(batch):
    return batch

if __name__ == "__main__":
    loader = DataLoader(Md5(sys.argv[1]), batch_size=4, num_workers=2, collate_fn=collate)
    out, pids = {}, set()
    for batch in loader:
        for rel, md5, pid in batch:
            out[rel] = md5
            pids.add(pid)
    print(json.dumps({"files": out, "workers": len(pids)}))
'''


def source_md5s(root):
    want = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                want[os.path.relpath(p, root)] = hashlib.md5(f.read()).hexdigest()
    return want


def torch_or_skip(ctx):
    if not os.path.exists(ctx.args.preload):
        log(f"SKIPPED: {ctx.args.preload} is not built (the interposer); cannot run python through the daemon")
        return False
    probe = subprocess.run([ctx.args.python, "-c", "import torch, torchvision"], capture_output=True)
    if probe.returncode != 0:
        log(f"SKIPPED: {ctx.args.python} cannot import torch and torchvision")
        return False
    return True


def case_python(ctx):
    if not torch_or_skip(ctx):
        return SKIP
    ctx.pack(parts=4)
    job = Job(ctx, 2)
    job.wait_ready()
    script = os.path.join(ctx.work, "dl.py")
    with open(script, "w") as f:
        f.write(DATALOADER)
    r = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--stats", "--",
                        ctx.args.python, script, "/fanstore/train"], capture_output=True, text=True,
                       env=ctx.env, timeout=300)
    check(r.returncode == 0, f"python through the daemon failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = source_md5s(os.path.join(ctx.src, "train"))
    log(f"DataLoader(num_workers=2) read {len(got['files'])} files in {got['workers']} workers")
    check(got["files"] == want, "md5sums through the daemon differ from the source")
    check(got["workers"] == 2, "expected both DataLoader workers to read")
    job.stop()
    out = job.output()
    check(len(re.findall(r"stopping on", out)) == 2, "both ranks must stop cleanly")
    c = counters(out, 0)
    log(f"rank 0 daemon: {c}")
    # (The workers leave with os._exit, so their FANSTORE_STATS lines never print: ask the daemon instead.)
    check(c and c["client requests"] > 0 and c["errors"] == 0,
          "the DataLoader workers must have fetched remote files through rank 0's daemon, without errors")


FD_READER = r"""
import hashlib, json, os, sys
root = sys.argv[1]
got = {}
for d, _, files in os.walk(root):
    for name in files:
        with open(os.path.join(d, name), "rb") as f:
            got[os.path.relpath(os.path.join(d, name), root)] = hashlib.md5(f.read()).hexdigest()
kinds = []
for n in os.listdir("/proc/self/fd"):
    try:
        kinds.append(os.readlink("/proc/self/fd/" + n))
    except FileNotFoundError:  # listdir's own descriptor
        pass
print(json.dumps({"files": got, "memfds": sum(k.startswith("/memfd:") for k in kinds),
                  "sockets": sum(k.startswith("socket:") for k in kinds)}))
"""


def case_client_fds(ctx):
    """A program reads multi-chunk remote files through the interposer: the client's worker threads fetch chunks
    and close each payload's memfd (a chunk larger than --conn-memory comes in a memfd of its own). Before, the
    interposer refused those closes as the program's close of an fd it never opened: one memfd leaked per chunk
    fetched on a worker thread."""
    if not os.path.exists(ctx.args.preload):
        log(f"SKIPPED: {ctx.args.preload} is not built (the interposer)")
        return SKIP
    ctx.pack(parts=4, chunk="2M", nfiles=16, sizes=(4500000,))
    job = Job(ctx, 2, "--conn-memory", "1M", "--cache-bytes", "0")
    job.wait_ready()
    script = os.path.join(ctx.work, "fds.py")
    with open(script, "w") as f:
        f.write(FD_READER)
    r = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--",
                        ctx.args.python, script, "/fanstore/train"], capture_output=True, text=True,
                       env=ctx.env, timeout=300)
    check(r.returncode == 0, f"python through the daemon failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    check(got["files"] == source_md5s(os.path.join(ctx.src, "train")), "md5sums through the daemon differ")
    job.stop()
    c = counters(job.output(), 0)
    log(f"{len(got['files'])} files read; open afterwards: {got['memfds']} memfds, {got['sockets']} sockets; "
        f"rank 0 daemon: {c}")
    check(c and c["client requests"] > 8, "the files must have been fetched from the other rank")
    # Kept by the client: the daemon connections (one per thread that fetched, at most 5 here) and no memfd (the
    # reply areas are mapped, their memfds closed; no fetch cache).
    check(got["memfds"] == 0 and got["sockets"] <= 5, "the client leaked descriptors")

def case_coalesce(ctx):
    """Eight processes on one node read the same remote files at once: each range crosses MPI once (joined while
    in flight, then read from the fetch cache, through the daemon or straight from its shared index), and every
    reader gets the right bytes."""
    os.makedirs(os.path.join(ctx.src, "big"))
    import random
    rnd = random.Random(3)
    for i in range(4):
        with open(os.path.join(ctx.src, "big", f"b{i}.bin"), "wb") as f:
            f.write(rnd.randbytes((3 << 20) + i * 4099))
    # One chunk per file (--chunk 4M), so "crosses MPI once" counts one peer fetch per remote file; larger files are
    # fetched chunk by chunk and each chunk is coalesced the same way.
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", ctx.img, "--parts", "2", "--chunk", "4M"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, r.stderr)
    job = Job(ctx, 2)
    job.wait_ready()
    out = ctx.check_all([0] * 8, "--which", "remote", "--threads", "2", what="a reader failed", timeout=120)[-1]
    remote = int(re.search(r"(\d+) remote\)", out).group(1))
    job.stop()
    c = counters(job.output(), 0)
    log(f"rank 0 daemon: {c}")
    shared = c["shared cache hits"]
    check(c["client requests"] + shared == 8 * remote, "every read went to the daemon or the shared fetch cache")
    check(c["peer fetches"] == remote, f"each of the {remote} remote files must cross MPI exactly once")
    check(c["cache hits"] + c["coalesced"] + shared == 7 * remote,
          "the other readers joined a fetch or read the fetch cache")


def case_chunked(ctx):
    """Replies bigger than one MPI message (1 GiB; here --max-message 64 KiB, so most files) travel in chunks:
    four clients on each of the four daemons read every file at once, so chunked replies from one owner to one asker
    overlap. Every byte must match the source, with no error and no timeout (chunks of one reply must never be
    taken for another's, or for a new message)."""
    ctx.pack(parts=8, nfiles=120, sizes=(70000, 131072, 300000, 700000))
    job = Job(ctx, 4, "--max-message", "65536", "--cache-bytes", "0", "--timeout", "20")
    job.wait_ready()
    ctx.check_all([r % 4 for r in range(8)], "--which", "remote", "--threads", "3",
                  what="chunked replies were lost or mixed up")
    job.stop()
    out = job.output()
    for r in range(4):
        c = counters(out, r)
        log(f"rank {r}: {c}")
        check(c and c["errors"] == 0 and c["timeouts"] == 0, f"rank {r} had errors or timeouts")
