"""Harness of the `fanstore serve` end-to-end tests: data, mpirun jobs, clients, process waits, daemon counters.

Everything a case makes lives in one temporary directory; jobs are started in their own session so a failed case
can kill them all. Synchronisation is by waiting for processes and sockets, never by sleeping a fixed time.
"""
import os
import random
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench"))
import daemon_cpu  # noqa: E402  (serve_pids)

SKIP = 77
# --timeout for jobs whose healthy reads must not fail: a live rank that a loaded 2-core machine stalls for most
# of the timeout (0.9 x per attempt) would be declared down; 2 s was not enough under ctest -j2.
PEER_TIMEOUT_S = 4.0


def log(msg):
    print(f"mpi_test: {msg}", flush=True)


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def make_tree(root, seed=1234, nfiles=96, sizes=(0, 17, 4096, 50000, 131072, 131072, 300000)):
    """A small tree: train/c0..c3 and val/, mixed sizes, half compressible, half random."""
    rnd = random.Random(seed)
    dirs = ["train/c0", "train/c1", "train/c2", "train/c3", "val"]
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(nfiles):
        d = dirs[i % len(dirs)]
        size = rnd.choice(sizes)
        if i % 2:
            unit = rnd.randbytes(64)
            data = (unit * (size // 64 + 1))[:size]
        else:
            data = rnd.randbytes(size)
        with open(os.path.join(root, d, f"f{i:04d}.bin"), "wb") as f:
            f.write(data)


def wait_gone(pid, timeout=30):
    """Waits until process `pid` (not necessarily our child) has exited: its pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        check(ready, f"process {pid} still runs {timeout} s after it was killed")
    finally:
        os.close(fd)


def mapped_sends_possible(ctx):
    """Whether the daemons can send ranges from their mappings here: leases on, and staging on a file system that
    grants them (else every range is pread, and the daemons say why)."""
    fs = subprocess.run(["stat", "-f", "-c", "%T", ctx.node(0)], capture_output=True, text=True).stdout.strip()
    with open("/proc/sys/fs/leases-enable") as f:
        leases = f.read().strip() == "1"
    return leases and fs in ("tmpfs", "ext2/ext3", "xfs", "btrfs", "f2fs")


def counters(out, rank):
    """The numbers of rank `rank`'s exit line ("stopping on ...: served N client requests (E errors, F failovers),
    ...; 3 timeouts, ..."): a dict from the words after each number to the number."""
    m = re.search(rf"rank {rank}\]: stopping on [^:]*: (.*)", out)
    if not m:
        return None
    found = {}
    for num, words in re.findall(r"(\d+) ([a-z][a-z ]*[a-z])", m.group(1)):
        found.setdefault(words, int(num))
    return found


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
        self.jobs = []

    def mpirun(self, np_, btl="self,vader"):
        return ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", btl, "-np", str(np_)]

    def pack(self, parts=8, chunk=None, **tree):
        make_tree(self.src, **tree)
        more = ["--chunk", chunk] if chunk else []
        r = subprocess.run([self.args.fanstore, "pack", self.src, "-o", self.img, "--parts", str(parts),
                            "--replicate", "val/*"] + more, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"pack failed: {r.stderr}")

    def node(self, rank):
        return os.path.join(self.work, f"node{rank}")

    def sock(self, rank):
        return os.path.join(self.node(rank), "fanstore.sock")

    def check_cmd(self, *extra):
        return [self.args.check, "--src", self.src] + list(extra)

    def run_check(self, rank, *extra, timeout=120, sock=None):
        env = dict(self.env, FANSTORE_DAEMON=sock or self.sock(rank))
        r = subprocess.run(self.check_cmd(*extra), capture_output=True, text=True, env=env, timeout=timeout)
        log(f"client@rank{rank} {' '.join(extra)} -> rc {r.returncode}: {r.stdout.strip()}")
        if r.returncode != 0 and r.stderr:
            log("  stderr: " + r.stderr.strip().replace("\n", "\n  stderr: ")[:3000])
        return r

    def start_check(self, rank, *extra):
        env = dict(self.env, FANSTORE_DAEMON=self.sock(rank))
        return subprocess.Popen(self.check_cmd(*extra), env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)

    def check_all(self, ranks, *extra, what, timeout=240):
        """One daemon_check per entry of `ranks` (a rank may repeat), all at once; each must exit 0 (`what`: what
        failed, for the message). Returns their outputs."""
        procs = [self.start_check(r, *extra) for r in ranks]
        outs = []
        for i, (r, p) in enumerate(zip(ranks, procs)):
            out, _ = p.communicate(timeout=timeout)
            log(f"client {i}@rank{r} -> rc {p.returncode}: {out.strip()[-300:]}")
            check(p.returncode == 0, f"client {i} on rank {r}: {what}")
            outs.append(out)
        return outs

    def kill_all(self):
        for j in self.jobs:
            if j.p.poll() is None:
                j.kill()


class Job:
    """One `mpirun ... fanstore serve` job."""

    def __init__(self, ctx, np_, *extra, wrap_exit=False, mpirun_extra=(), local=None, btl="self,vader",
                 launcher=None, image=None):
        self.ctx, self.np = ctx, np_
        self.logpath = os.path.join(ctx.work, f"serve-{time.time_ns()}.log")
        serve = [ctx.args.fanstore, "serve", "--image", image or ctx.img,
                 "--local", local or os.path.join(ctx.work, "node{rank}")]
        serve += list(extra)
        if wrap_exit:
            # Reports every rank's own exit status, which mpirun alone does not.
            serve = ["sh", "-c", '"$@"; echo "rank ${OMPI_COMM_WORLD_RANK} exit $?"', "sh"] + serve
        self.logf = open(self.logpath, "w")
        cmd = (launcher or ctx.mpirun(np_, btl)) + list(mpirun_extra) + serve
        self.p = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=ctx.env,
                                  start_new_session=True)
        ctx.jobs.append(self)

    def output(self):
        with open(self.logpath) as f:
            return f.read()

    def wait_output(self, done, timeout):
        """The log once `done(log)` holds, mpirun has exited (nothing more will come) or `timeout` s have passed:
        mpirun forwards what the ranks print a little later, and after a rank's own exit."""
        deadline = time.time() + timeout
        out = self.output()
        while not done(out) and time.time() < deadline and self.p.poll() is None:
            select.select([], [], [], 0.05)
            out = self.output()
        return self.output()

    def wait_ready(self, timeout=90, socks=None, staged=True):
        """Every socket answers and rank 0 said "ready"; with `staged` (what most cases need: every partition
        where placement puts it) also every rank has staged, as `fanstore wait --staged` and the "staged:" line
        say."""
        more = ["--staged"] if staged else []
        for s in socks or [self.ctx.sock(r) for r in range(self.np)]:
            w = subprocess.run([self.ctx.args.fanstore, "wait", s, "--timeout", str(timeout)] + more,
                               capture_output=True, text=True)
            check(w.returncode == 0, f"{s} never became ready: {w.stderr.strip()}\n{self.output()}")
        # Rank 0 prints "ready" right after the barrier that follows every rank's socket rename.
        out = self.wait_output(lambda o: "ready:" in o, 30)
        check("fanstore serve: ready:" in out, "no ready line from rank 0:\n" + out)
        if staged:
            out = self.wait_output(lambda o: "fanstore serve: staged:" in o, 30)
            check("fanstore serve: staged:" in out, "no staged line from rank 0:\n" + out)

    def pids(self):
        """rank -> pid of this job's `fanstore serve` processes (descendants of its mpirun)."""
        return daemon_cpu.serve_pids(self.p.pid)

    def wait(self, timeout=60):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail(f"mpirun did not exit within {timeout} s:\n{self.output()}")

    def stop(self, timeout=60):
        """SIGTERM to mpirun (as a user's Ctrl-C or Slurm would), which forwards it to every rank. Returns
        mpirun's status, which is non-zero whenever mpirun itself was signalled: callers check the ranks'
        own "stopping on" lines instead."""
        if self.p.poll() is None:
            for pid in self.pids().values():  # a stopped rank must be able to die
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
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


def parts_of(node):
    return sorted(f for f in os.listdir(node) if f.endswith(".fsp"))
