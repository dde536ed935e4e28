#!/usr/bin/python3
"""End-to-end tests of `fanstore serve` (the MPI daemon) on one machine: 4 ranks, one local directory each.

Each --case starts its own `mpirun --oversubscribe -np N fanstore serve`, generates its data with a fixed seed
in a temporary directory, and removes everything at the end. Exit 0 pass, 1 fail, 77 skipped (printed loudly).
Kill-one-daemon is tested twice: SIGSTOP (a peer that no longer answers, then answers again after SIGCONT) and
SIGKILL under `--mca orte_abort_on_non_zero_status 0` (without it Open MPI 4.1's mpirun aborts the whole job
when a rank dies).
"""
import argparse
import hashlib
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def log(msg):
    print(f"mpi_test: {msg}", flush=True)


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def make_tree(root, seed=1234, nfiles=96):
    """A small tree: train/c0..c3 and val/, mixed sizes (0 B .. 300 KiB, some exactly 128 KiB),
    half compressible, half random."""
    rnd = random.Random(seed)
    dirs = ["train/c0", "train/c1", "train/c2", "train/c3", "val"]
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(nfiles):
        d = dirs[i % len(dirs)]
        size = rnd.choice([0, 17, 4096, 50000, 131072, 131072, 300000])
        if i % 2:
            unit = bytes(rnd.getrandbits(8) for _ in range(64))
            data = (unit * (size // 64 + 1))[:size]
        else:
            data = rnd.getrandbits(8 * size).to_bytes(size, "little") if size else b""
        with open(os.path.join(root, d, f"f{i:03d}.bin"), "wb") as f:
            f.write(data)


class Ctx:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.src = os.path.join(work, "src")
        self.img = os.path.join(work, "img")
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_rmaps_base_oversubscribe="1",
                        # Every read in these tests must reach the daemon path, not this process's cache.
                        FANSTORE_CACHE_BYTES="0")
        self.env.pop("FANSTORE_IMAGE", None)
        self.env.pop("FANSTORE_DAEMON", None)

    def mpirun(self, np_):
        return ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "-np", str(np_)]

    def pack(self, parts=8):
        make_tree(self.src)
        r = subprocess.run([self.args.fanstore, "pack", self.src, "-o", self.img, "--parts", str(parts),
                            "--replicate", "val/*"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"pack failed: {r.stderr}")

    def node(self, rank):
        return os.path.join(self.work, f"node{rank}")

    def sock(self, rank):
        return os.path.join(self.node(rank), "fanstore.sock")

    def run_check(self, rank, *extra, timeout=60):
        env = dict(self.env, FANSTORE_DAEMON=self.sock(rank))
        cmd = [self.args.check, "--src", self.src] + list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        log(f"client@rank{rank} {' '.join(extra)} -> rc {r.returncode}: {r.stdout.strip()}")
        if r.returncode != 0 and r.stderr:
            log("  stderr: " + r.stderr.strip().replace("\n", "\n  stderr: ")[:3000])
        return r


class Job:
    """One `mpirun ... fanstore serve` job."""

    def __init__(self, ctx, np_, *extra, wrap_exit=False, mpirun_extra=()):
        self.ctx, self.np = ctx, np_
        self.logpath = os.path.join(ctx.work, f"serve-{time.time_ns()}.log")
        serve = [ctx.args.fanstore, "serve", "--image", ctx.img, "--local", os.path.join(ctx.work, "node{rank}")]
        serve += list(extra)
        if wrap_exit:
            # Reports every rank's own exit status, which mpirun alone does not.
            serve = ["sh", "-c", '"$@"; echo "rank ${OMPI_COMM_WORLD_RANK} exit $?"', "sh"] + serve
        self.logf = open(self.logpath, "w")
        self.p = subprocess.Popen(ctx.mpirun(np_) + list(mpirun_extra) + serve, stdout=self.logf, stderr=subprocess.STDOUT,
                                  env=ctx.env, start_new_session=True)

    def output(self):
        with open(self.logpath) as f:
            return f.read()

    def wait_ready(self, timeout=60):
        for r in range(self.np):
            w = subprocess.run([self.ctx.args.fanstore, "wait", self.ctx.sock(r), "--timeout", str(timeout)],
                               capture_output=True, text=True)
            check(w.returncode == 0, f"rank {r} never became ready: {w.stderr.strip()}\n{self.output()}")
        deadline = time.time() + 10
        while "ready:" not in self.output() and time.time() < deadline:
            time.sleep(0.05)
        check("fanstore serve: ready:" in self.output(), "no ready line from rank 0:\n" + self.output())

    def pids(self):
        """rank -> pid of the `fanstore serve` processes of this job (found by their environment)."""
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                with open(f"/proc/{d}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if len(cmd) < 2 or not cmd[0].endswith(b"fanstore") or cmd[1] != b"serve":
                continue
            if self.ctx.work.encode() not in b" ".join(cmd):
                continue
            for e in env:
                if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                    out[int(e.split(b"=")[1])] = int(d)
        return out

    def wait(self, timeout=30):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail(f"mpirun did not exit within {timeout} s:\n{self.output()}")

    def stop(self, timeout=30):
        """SIGTERM to mpirun (as a user's Ctrl-C or Slurm would), which forwards it to every rank. Returns
        mpirun's status, which is non-zero whenever mpirun itself was signalled: callers check the ranks'
        own "stopping on" lines instead."""
        if self.p.poll() is None:
            for pid in self.pids().values():  # a stopped rank must be able to die
                os.kill(pid, signal.SIGCONT)
            self.p.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in self.pids().values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle_cpu(pids, seconds=3.0):
    """Percent of one core each daemon used over `seconds` while nobody reads."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = {r: cpu_ticks(p) for r, p in pids.items()}
    time.sleep(seconds)
    return {r: 100.0 * (cpu_ticks(p) - t0[r]) / hz / seconds for r, p in pids.items()}


def parts_of(node):
    return sorted(f for f in os.listdir(node) if f.endswith(".fsp"))


def case_read_all(ctx):
    ctx.pack(parts=8)
    job = Job(ctx, 4)
    jobs.append(job)
    job.wait_ready()
    for r in range(4):
        got = parts_of(ctx.node(r))
        want = sorted([f"part-{i:05d}.fsp" for i in range(8) if i % 4 == r] + ["part-rep.fsp"])
        check(got == want, f"rank {r} staged {got}, expected {want}")
    w = subprocess.run([ctx.args.fanstore, "wait", os.path.join(ctx.work, "nobody.sock"), "--timeout", "0.3"],
                       capture_output=True, text=True)
    check(w.returncode == 1 and "not ready" in w.stderr, f"fanstore wait on a missing socket: {w.returncode} {w.stderr}")
    r = ctx.run_check(0, "--which", "all")
    check(r.returncode == 0, "reading every file through rank 0 failed")
    m = re.search(r"\((\d+) local, (\d+) remote\)", r.stdout)
    check(m and int(m.group(2)) > 2 * int(m.group(1)) // 2, "expected most files to be remote")
    procs = [subprocess.Popen([ctx.args.check, "--src", ctx.src, "--threads", "2"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(ctx.env, FANSTORE_DAEMON=ctx.sock(i))) for i in range(4)]
    for i, p in enumerate(procs):
        out, _ = p.communicate(timeout=60)
        log(f"concurrent client@rank{i} -> rc {p.returncode}: {out.strip()}")
        check(p.returncode == 0, f"concurrent client on rank {i} failed")
    time.sleep(1.0)  # let the progress threads reach their idle wait
    cpu = idle_cpu(job.pids())
    log("idle daemon CPU over 3 s: " + ", ".join(f"rank {r}: {c:.2f}%" for r, c in sorted(cpu.items())))
    # Not a timing assertion: a busy-spinning daemon would show ~100% (or 50% on 2 oversubscribed cores).
    check(all(c < 20 for c in cpu.values()), "a daemon uses CPU while idle (busy spinning?)")
    job.stop()
    out = job.output()
    log("daemon exit lines:\n" + "\n".join(l for l in out.splitlines() if "stopping on" in l))
    check(len(re.findall(r"fanstore serve\[rank \d\]: stopping on .*served \d+ client requests", out)) == 4,
          "expected one exit line per rank:\n" + out)
    for r in range(4):
        check(not os.path.exists(ctx.sock(r)), f"socket of rank {r} left behind")
        check(parts_of(ctx.node(r)), "staged data removed without --cleanup")


def case_replicas(ctx):
    ctx.pack(parts=8)
    job = Job(ctx, 4, "--replicas", "2", "--timeout", "4", "--cleanup")
    jobs.append(job)
    job.wait_ready()
    for r in range(4):
        got = parts_of(ctx.node(r))
        want = sorted([f"part-{i:05d}.fsp" for i in range(8) if r in (i % 4, (i % 4 + 1) % 4)] + ["part-rep.fsp"])
        check(got == want, f"rank {r} staged {got}, expected {want}")
    # Lose rank 1's staged data: truncate (so even an open fd reads nothing) and delete.
    for f in parts_of(ctx.node(1)):
        path = os.path.join(ctx.node(1), f)
        os.truncate(path, 0)
        os.unlink(path)
    log(f"removed rank 1's staged partitions; left: {parts_of(ctx.node(1))}")
    for rank in (0, 1, 2):
        r = ctx.run_check(rank, "--which", "all", "--threads", "2")
        check(r.returncode == 0, f"reads through rank {rank} failed after rank 1 lost its data")
    job.stop()
    out = job.output()
    log("daemon exit lines:\n" + "\n".join(l for l in out.splitlines() if "stopping on" in l))
    failovers = sum(int(x) for x in re.findall(r"(\d+) failovers", out))
    check(failovers > 0, "expected some reads to fail over to the second replica")
    for r in range(4):
        check(not os.path.exists(ctx.node(r)) or not parts_of(ctx.node(r)), f"--cleanup left data on rank {r}")


def case_fault(ctx):
    ctx.pack(parts=8)
    timeout = 2.0
    job = Job(ctx, 4, "--timeout", str(timeout))
    jobs.append(job)
    job.wait_ready()
    pids = job.pids()
    check(len(pids) == 4, f"found daemon pids {pids}")
    # Warm the owners up so the check below only measures the failure path.
    check(ctx.run_check(0, "--which", "remote").returncode == 0, "reads before the fault failed")
    os.kill(pids[1], signal.SIGSTOP)
    log(f"SIGSTOPped rank 1's daemon (pid {pids[1]})")
    try:
        t0 = time.time()
        r = ctx.run_check(0, "--owner-rank", "1", "--nranks", "4", "--remote-fail", "--threads", "4",
                          "--max-seconds", str(timeout + 0.75))
        log(f"  took {time.time() - t0:.2f} s")
        check(r.returncode == 0, "reads of files owned by the stopped daemon must fail with EIO within --timeout")
        r = ctx.run_check(0, "--which", "local")
        check(r.returncode == 0, "local reads must go on while a peer is stopped")
        r = ctx.run_check(0, "--owner-rank", "2", "--nranks", "4")
        check(r.returncode == 0, "reads from the other live peers must go on")
    finally:
        os.kill(pids[1], signal.SIGCONT)
    r = ctx.run_check(0, "--owner-rank", "1", "--nranks", "4")
    check(r.returncode == 0, "reads from rank 1 must work again once it answers")

    # The node's own daemon goes away under a connected client: remote reads fail at once, local ones go on.
    go = os.path.join(ctx.work, "go")
    env = dict(ctx.env, FANSTORE_DAEMON=ctx.sock(0))
    client = subprocess.Popen([ctx.args.check, "--src", ctx.src, "--which", "all", "--remote-fail", "--wait-file", go,
                               "--max-seconds", "1.0"], env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    # Wait for its warm-up read (it is connected now), then take the daemons away.
    ready, _, _ = select.select([client.stdout], [], [], 30)
    check(ready, "the client never reported its warm-up read")
    first = client.stdout.readline()
    job.stop()
    check(len(re.findall(r"stopping on", job.output())) == 4, "every rank must stop cleanly:\n" + job.output())
    open(go, "w").close()
    out, _ = client.communicate(timeout=60)
    out = first + out
    log(f"client after its daemon stopped -> rc {client.returncode}: {out.strip()}")
    check("warm-up read" in out and ": ok" in out, "warm-up read before the daemon stopped failed")
    check(client.returncode == 0, "after the daemon is gone: remote reads must be EIO within 1 s, local ones must work")

    # A real death: SIGKILL. Open MPI aborts the whole job when a rank dies unless told not to; with
    # orte_abort_on_non_zero_status=0 the survivors keep serving and time out on the dead peer.
    job = Job(ctx, 4, "--timeout", str(timeout), mpirun_extra=("--mca", "orte_abort_on_non_zero_status", "0"))
    jobs.append(job)
    job.wait_ready()
    pids = job.pids()
    os.kill(pids[1], signal.SIGKILL)
    log(f"SIGKILLed rank 1's daemon (pid {pids[1]})")
    time.sleep(0.5)
    r = ctx.run_check(0, "--owner-rank", "1", "--nranks", "4", "--remote-fail", "--threads", "4",
                      "--max-seconds", str(timeout + 0.75))
    check(r.returncode == 0, "reads of files owned by the killed daemon must fail with EIO within --timeout")
    r = ctx.run_check(0, "--owner-rank", "3", "--nranks", "4")
    check(r.returncode == 0, "reads from the live peers must go on after a peer was killed")
    r = ctx.run_check(2, "--which", "local")
    check(r.returncode == 0, "local reads on another node must go on after a peer was killed")
    job.stop()
    check(len(re.findall(r"stopping on", job.output())) == 3, "the three survivors must stop cleanly:\n" + job.output())


def case_nospace(ctx):
    ctx.pack(parts=8)
    job = Job(ctx, 4, "--reserve", str(10 ** 18), wrap_exit=True)
    jobs.append(job)
    rc = job.wait(60)
    out = job.output()
    log("output:\n" + out.strip())
    exits = dict(re.findall(r"rank (\d) exit (\d+)", out))
    check(len(exits) == 4 and all(v != "0" for v in exits.values()), f"every rank must exit non-zero: {exits}")
    errs = re.findall(r"fanstore serve\[rank (\d)\]: no space: not enough space in \S+ for partition (part-\S+\.fsp): "
                      r"this rank needs (\d+) bytes", out)
    check(len(errs) == 4, "expected one space error per rank naming the partition and the bytes")

    # One rank fails alone (its --local is a regular file): every rank must still exit non-zero.
    for r in range(4):
        shutil.rmtree(ctx.node(r), ignore_errors=True)
    open(ctx.node(2), "w").close()
    job = Job(ctx, 4, wrap_exit=True)
    jobs.append(job)
    rc = job.wait(60)
    out = job.output()
    log("output:\n" + out.strip())
    exits = dict(re.findall(r"rank (\d) exit (\d+)", out))
    check(len(exits) == 4 and all(v != "0" for v in exits.values()),
          f"every rank must exit non-zero when one fails: {exits}")
    check(re.search(r"fanstore serve\[rank 2\]: .*node2", out), "rank 2 must say what failed")
    check("staging failed on 1 rank(s)" in out, "rank 0 must say another rank failed")
    os.unlink(ctx.node(2))


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


def case_python(ctx):
    if not os.path.exists(ctx.args.preload):
        log(f"SKIPPED: {ctx.args.preload} is not built (the interposer); cannot run python through the daemon")
        return SKIP
    python = os.environ.get("FANSTORE_PYTHON") or "/usr/bin/python3"
    probe = subprocess.run([python, "-c", "import torch, torchvision"], capture_output=True)
    if probe.returncode != 0:
        log(f"SKIPPED: {python} cannot import torch and torchvision")
        return SKIP
    ctx.pack(parts=4)
    job = Job(ctx, 2)
    jobs.append(job)
    job.wait_ready()
    script = os.path.join(ctx.work, "dl.py")
    with open(script, "w") as f:
        f.write(DATALOADER)
    import json
    r = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--stats", "--",
                        python, script, "/fanstore/train"], capture_output=True, text=True,
                       env=ctx.env, timeout=120)
    check(r.returncode == 0, f"python through the daemon failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = {}
    train = os.path.join(ctx.src, "train")
    for d, _, files in os.walk(train):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                want[os.path.relpath(p, train)] = hashlib.md5(f.read()).hexdigest()
    log(f"DataLoader(num_workers=2) read {len(got['files'])} files in {got['workers']} workers")
    # (The workers leave with os._exit, so their FANSTORE_STATS lines never print: ask the daemon instead.)
    check(got["files"] == want, "md5sums through the daemon differ from the source")
    check(got["workers"] == 2, "expected both DataLoader workers to read")
    job.stop()
    out = job.output()
    check(len(re.findall(r"stopping on", out)) == 2, "both ranks must stop cleanly")
    served = re.search(r"rank 0\]: stopping on .*served (\d+) client requests \((\d+) errors", out)
    log("rank 0 daemon: " + (served.group(0) if served else "no exit line"))
    check(served and int(served.group(1)) > 0 and served.group(2) == "0",
          "the DataLoader workers must have fetched remote files through rank 0's daemon, without errors")


def case_bench(ctx):
    """Not a test: remote 128 KiB read latency next to an MPI ping-pong (run by hand)."""
    os.makedirs(ctx.src)
    rnd = random.Random(7)
    for i in range(64):
        with open(os.path.join(ctx.src, f"r{i:03d}.bin"), "wb") as f:
            f.write(rnd.getrandbits(8 * 131072).to_bytes(131072, "little"))
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", ctx.img, "--parts", "8"], capture_output=True,
                       text=True)
    check(r.returncode == 0, r.stderr)
    job = Job(ctx, 2)
    jobs.append(job)
    job.wait_ready()
    bench = os.path.join(os.path.dirname(ctx.args.check), "bench_remote")
    r = subprocess.run(ctx.mpirun(2) + [bench, "--socket", ctx.sock(0), "--size", "131072", "--rounds", "20"],
                       capture_output=True, text=True, env=ctx.env, timeout=300)
    print(r.stdout, r.stderr, flush=True)
    time.sleep(1.0)
    cpu = idle_cpu(job.pids(), 5.0)
    log("idle daemon CPU over 5 s: " + ", ".join(f"rank {k}: {c:.2f}%" for k, c in sorted(cpu.items())))
    job.stop()
    log("daemon exit lines:\n" + "\n".join(l for l in job.output().splitlines() if "stopping on" in l))
    check(r.returncode == 0, "bench failed")


CASES = {"read_all": case_read_all, "replicas": case_replicas, "fault": case_fault, "nospace": case_nospace,
         "python": case_python, "bench": case_bench}
jobs = []


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--fanstore", required=True)
    ap.add_argument("--check", required=True, help="the daemon_check test client")
    ap.add_argument("--preload", default="", help="libfanstore_preload.so (the python case needs it)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        print("*** SKIPPED: mpirun not found on PATH: the MPI daemon tests did not run ***", flush=True)
        return SKIP
    work = tempfile.mkdtemp(prefix="fanstore-mpi-")
    ctx = Ctx(args, work)
    t0 = time.time()
    try:
        rc = CASES[args.case](ctx) or 0
        if rc == SKIP:
            print(f"*** SKIPPED: mpi case {args.case} ***", flush=True)
        else:
            log(f"PASS {args.case} in {time.time() - t0:.1f} s")
        return rc
    except Fail as e:
        log(f"FAIL {args.case}: {e}")
        return 1
    finally:
        for j in jobs:
            if j.p.poll() is None:
                j.kill()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
