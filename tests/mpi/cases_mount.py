"""The FUSE front end through a live daemon: `fanstore mount --daemon` (detached, as users run it, and with "{node}"
in the socket path, as one command line for every node) serves every file, local and remote, byte for byte."""
import os
import shutil
import subprocess
import time

from cases_basic import source_md5s
from mpi_harness import Job, SKIP, check, counters, log


def mounted(path):
    return subprocess.run(["mountpoint", "-q", path]).returncode == 0


def case_mount(ctx):
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        log("SKIPPED: no /dev/fuse or fusermount3")
        return SKIP
    ctx.pack(parts=4)
    job = Job(ctx, 2)
    job.wait_ready()
    mp = os.path.join(ctx.work, "mnt")
    os.makedirs(mp)
    # {node} -> SLURMD_NODENAME: "node1" is rank 1's staging directory, so this mount reads through rank 1's daemon.
    template = os.path.join(ctx.work, "{node}", "fanstore.sock")
    env = dict(ctx.env, SLURMD_NODENAME="node1")
    mounts = [mp]
    try:
        r = subprocess.run([ctx.args.fanstore, "mount", "--daemon", template, mp], capture_output=True, text=True,
                           env=env, timeout=60)
        check(r.returncode == 0, f"fanstore mount --daemon {template} failed (rc {r.returncode}): {r.stderr}")
        check(mounted(mp), "fanstore mount returned 0 but nothing is mounted")
        want = source_md5s(ctx.src)
        got = source_md5s(mp)
        log(f"read {len(got)} files through the FUSE mount and rank 1's daemon")
        check(got == want, "md5sums through `fanstore mount --daemon` differ from the source")
        # A relative socket path: the detached server chdirs to "/", and every remote file gave EIO.
        rel = os.path.join(ctx.work, "mnt-rel")
        os.makedirs(rel)
        mounts.append(rel)
        r = subprocess.run([ctx.args.fanstore, "mount", "--daemon", os.path.join("node1", "fanstore.sock"), rel],
                           capture_output=True, text=True, cwd=ctx.work, env=ctx.env, timeout=60)
        check(r.returncode == 0 and source_md5s(rel) == want,
              f"a mount given a relative socket path must read every file (rc {r.returncode}): {r.stderr}")
        os.makedirs(os.path.join(ctx.work, "mnt2"))
        bad = subprocess.run([ctx.args.fanstore, "mount", "--daemon", os.path.join(ctx.work, "{node}", "x.sock"),
                              os.path.join(ctx.work, "mnt2")], capture_output=True, text=True,
                             env=dict(ctx.env, SLURMD_NODENAME="../etc"), timeout=60)
        check(bad.returncode != 0 and bad.stderr.count("\n") == 1 and "node" in bad.stderr,
              f"a node name that is not one path component must be one clear line: rc {bad.returncode} {bad.stderr}")
    finally:
        for m in mounts:
            if mounted(m):
                subprocess.run(["fusermount3", "-u", m], capture_output=True)
                for _ in range(100):  # the detached server exits once unmounted; its connection closes with it
                    if not mounted(m):
                        break
                    time.sleep(0.05)
    job.stop()
    c = counters(job.output(), 1)
    log(f"rank 1 daemon: {c}")
    check(c and c["client requests"] > 0 and c["errors"] == 0,
          "the mount must have fetched remote files through rank 1's daemon, without errors")
