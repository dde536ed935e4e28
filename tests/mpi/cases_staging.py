"""Staging cases (docs/daemon.md, "Staging"): each byte of the image directory read once whatever --replicas and
the replicated partition ask for; clients served right while staging is still going (slowed on purpose with
--stage-bandwidth); a rank killed mid-staging; a piece damaged in transit; a damaged partition with and without
--strict-staging; --stage-readers."""
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import time

from mpi_harness import Job, check, counters, log, wait_gone

HANG_S = 60
ABORT_OFF = ("--mca", "orte_abort_on_non_zero_status", "0")


def image_parts(ctx):
    """Partition file name -> bytes, from the image directory."""
    out = {}
    for f in sorted(os.listdir(ctx.img)):
        if f.endswith(".fsp"):
            with open(os.path.join(ctx.img, f), "rb") as fh:
                out[f] = fh.read()
    return out


def expected_on(rank, nranks, replicas, names):
    """The partition files rank `rank` keeps (placement.hpp: partition i on ranks i..i+K-1 mod N; the replicated
    one everywhere)."""
    keep = []
    for f in names:
        if f == "part-rep.fsp":
            keep.append(f)
            continue
        i = int(f[5:10])
        if any((i + j) % nranks == rank for j in range(min(replicas, nranks))):
            keep.append(f)
    return sorted(keep)


def check_staged_copies(ctx, nranks, replicas, ranks=None):
    parts = image_parts(ctx)
    for r in ranks if ranks is not None else range(nranks):
        node = ctx.node(r)
        have = sorted(f for f in os.listdir(node) if f.endswith(".fsp"))
        want = expected_on(r, nranks, replicas, parts)
        check(have == want, f"rank {r} staged {have}, placement says {want}")
        for f in have:
            with open(os.path.join(node, f), "rb") as fh:
                check(fh.read() == parts[f], f"rank {r}'s staged {f} differs from the image's")
        temps = [f for f in os.listdir(node) if ".tmp." in f]
        check(not temps, f"rank {r} left temporary files {temps}")


def staging_bytes(out, nranks):
    got = {}
    for r in range(nranks):
        c = counters(out, r)
        check(c is not None, f"no exit line from rank {r}:\n{out}")
        got[r] = c["bytes read from the image directory by staging"]
    return got


def case_staging_once(ctx):
    """--replicas 2 and a replicated partition on 4 ranks: the image directory is read once per byte, by every
    rank a share of it, and every rank ends with exactly its partitions, byte for byte."""
    ctx.pack(parts=8, nfiles=160)
    total = sum(len(b) for b in image_parts(ctx).values())
    job = Job(ctx, 4, "--replicas", "2", "--stage-piece", "64K", "--cleanup")
    job.wait_ready()
    check_staged_copies(ctx, 4, 2)
    r = ctx.run_check(1, "--threads", "2")
    check(r.returncode == 0, "reading the tree after staging failed")
    job.stop()
    out = job.output()
    got = staging_bytes(out, 4)
    log(f"image partitions {total} bytes; read by staging per rank: {got}")
    check(sum(got.values()) == total, f"staging read {sum(got.values())} bytes of the image directory, "
                                      f"the partitions hold {total}: each byte must be read exactly once")
    check(max(got.values()) < total // 2, "one rank read half the image or more: the reads must be spread")
    m = re.search(r"staged: 4 ranks, .*?; ([\d.]+) MiB read from the image directory", out)
    check(m is not None, "no staged line:\n" + out)


def case_staging_serve_early(ctx):
    """Staging slowed to 256 KiB/s per node: every socket answers within 2 s of the start, and a client on every rank
    reads the files of partitions 0 and 4 right while staging is still going (no "staged:" line yet); then staging
    ends. (Not every file: a piece a reader waits for is staged at once, whatever the pace, so reading them all
    would end staging with the readers.)"""
    ctx.pack(parts=8, nfiles=120)
    t0 = time.time()
    job = Job(ctx, 4, "--replicas", "2", "--stage-bandwidth", "256K", "--stage-piece", "64K", "--cleanup")
    job.wait_ready(staged=False)
    ready_s = time.time() - t0
    log(f"every socket answered {ready_s:.2f} s after mpirun started")
    ctx.check_all(range(4), "--threads", "2", "--max-seconds", str(HANG_S), "--owner-rank", "0", "--nranks", "4",
                  what="read wrong bytes or failed while staging")
    out = job.output()
    check("fanstore serve: staged:" not in out, "staging ended before the clients did: slow it down further")
    check(any(".tmp." in f for r in range(4) for f in os.listdir(ctx.node(r))),
          "no partition was still being staged while the clients read")
    job.wait_ready(timeout=240)
    check_staged_copies(ctx, 4, 2)
    job.stop()
    out = job.output()
    readers = sum(counters(out, r)["for readers"] for r in range(4))
    log(f"bytes the readers' misses took from the image directory: {readers}")


def case_staging_hurry(ctx):
    """Staging slowed to 64 KiB/s, 2 ranks: small files that rank 0 stages last (after 512 KiB of big ones) are read
    through rank 0 at once. Their piece is read next and at once, whatever the cap, cutting staging's paced wait
    short, so the replies need not wait out a fifth of --timeout and the image directory is still read once: rank 0's
    readers take no byte from it (before, each file waited 1 s and was then read from the image directory)."""
    rnd = random.Random(7)
    want = {}
    for d, n, size in (("big", 4, 256 << 10), ("small", 8, 1000)):
        os.makedirs(os.path.join(ctx.src, d), exist_ok=True)
        for i in range(n):
            data = rnd.randbytes(size)
            with open(os.path.join(ctx.src, d, f"{d[0]}{i}"), "wb") as f:
                f.write(data)
            want[f"{d}/{d[0]}{i}"] = hashlib.md5(data).hexdigest()
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", ctx.img, "--parts", "2"], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, f"pack failed: {r.stderr}")
    # Rank 0 stages partition 0: its small files come after its big ones (sorted paths), 8 pieces of 64 KiB later.
    mine = []
    for name in sorted(want):
        st = subprocess.run([ctx.args.fanstore, "stat", ctx.img, name], capture_output=True, text=True).stdout
        if name.startswith("small/") and "part: 0 " in st:
            mine.append(name)
    check(len(mine) >= 2, f"expected small files in partition 0, got {mine}")
    job = Job(ctx, 2, "--stage-bandwidth", "64K", "--stage-piece", "64K", "--cleanup")
    job.wait_ready(staged=False)
    env = dict(ctx.env, FANSTORE_NODE_CACHE="off")
    r = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--", "md5sum"] +
                       [f"/fanstore/{n}" for n in mine], capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 0, f"reading {mine} through rank 0 failed: {r.stderr}")
    got = {line.split()[1][len("/fanstore/"):]: line.split()[0] for line in r.stdout.splitlines()}
    check(all(got.get(n) == want[n] for n in mine), f"wrong bytes: {got}")
    out = job.output()
    check("fanstore serve: staged:" not in out, "staging ended before the client read: slow it down further")
    job.stop()
    out = job.output()
    readers = counters(out, 0)["for readers"]
    log(f"rank 0's readers took {readers} bytes from the image directory")
    check(readers == 0, f"rank 0's readers read {readers} bytes from the image directory: staging's read was not "
          "hurried:\n" + out)


def case_staging_kill(ctx):
    """SIGKILL of one rank while staging runs (slowed, --replicas 2): the others stage its pieces from the image
    directory themselves, every client on a survivor reads every file right within the hang bound, and the
    survivors stop cleanly."""
    ctx.pack(parts=8, nfiles=120)
    job = Job(ctx, 4, "--replicas", "2", "--stage-bandwidth", "512K", "--stage-piece", "64K", "--timeout", "2",
              mpirun_extra=ABORT_OFF)
    job.wait_ready(staged=False)
    pids = job.pids()
    os.kill(pids[2], signal.SIGKILL)
    wait_gone(pids[2])
    log(f"SIGKILLed rank 2 (pid {pids[2]}) mid-staging")
    for r in (0, 1, 3):
        res = ctx.run_check(r, "--threads", "2", "--max-seconds", str(HANG_S), timeout=240)
        check(res.returncode == 0, f"a client on rank {r} failed after rank 2 died")
    # The survivors finish their own staging (no "staged:" line: rank 2 never reports).
    deadline = time.time() + 120
    while any(".tmp." in f for r in (0, 1, 3) for f in os.listdir(ctx.node(r))):
        check(time.time() < deadline, "the survivors did not finish staging after rank 2 died:\n" + job.output())
        time.sleep(0.2)
    check_staged_copies(ctx, 4, 2, ranks=(0, 1, 3))
    # `fanstore wait --staged` on a survivor ends with one line naming rank 2 once the survivors have found it down
    # (it waited out its whole timeout saying "serving, still staging" while nothing was being staged).
    for r in (0, 3):
        w = subprocess.run([ctx.args.fanstore, "wait", ctx.sock(r), "--staged", "--timeout", "60"],
                           capture_output=True, text=True)
        log(f"wait --staged on rank {r} -> rc {w.returncode}: {w.stderr.strip()}")
        check(w.returncode == 1 and w.stderr.count("\n") == 1 and "will not be staged: rank 2 is down" in w.stderr
              and "still staging" not in w.stderr, f"wait --staged after rank 2 died: {w.stderr}")
    out = job.wait_output(lambda o: "staging over on 3 of 4 ranks" in o, 30)
    check(re.search(r"staging over on 3 of 4 ranks .*rank 2 did not report", out) and "staged:" not in out,
          "rank 0 must say that staging is over without rank 2:\n" + out)
    # Plain `wait` still says the survivors serve.
    w = subprocess.run([ctx.args.fanstore, "wait", ctx.sock(1), "--timeout", "60"], capture_output=True, text=True)
    check(w.returncode == 0, f"plain wait on a survivor: {w.stderr}")
    job.stop()
    out = job.output()
    check(len(re.findall(r"stopping on", out)) == 3, "the three survivors must stop cleanly:\n" + out)
    check("rank 2 did not send a piece" in out, "a survivor must say it read rank 2's pieces itself:\n" + out)


def case_staging_corrupt(ctx):
    """The first piece each daemon receives is damaged on arrival (FANSTORE_TEST_CORRUPT_PIECE=0): its checksums
    refuse it, it is fetched again, and the staged copies are the image's bytes."""
    ctx.pack(parts=8)
    env = dict(ctx.env, FANSTORE_TEST_CORRUPT_PIECE="0")
    saved, ctx.env = ctx.env, env
    try:
        job = Job(ctx, 4, "--replicas", "2", "--stage-piece", "64K", "--cleanup")
    finally:
        ctx.env = saved
    job.wait_ready()
    check_staged_copies(ctx, 4, 2)
    out = job.output()
    m = re.search(r"(\d+) pieces? refetched", out)
    check(m and int(m.group(1)) == 4, "each of the 4 ranks must have refetched one piece:\n" + out)
    check(out.count("damaged in transit") == 4, "each refusal must be said once:\n" + out)
    check(ctx.run_check(0).returncode == 0, "reading the tree after the refetches failed")
    job.stop()


def damage_partition(ctx, name):
    path = os.path.join(ctx.img, name)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))


def case_staging_failure(ctx):
    """A partition damaged in the image directory. By default the rank that reads it gives up staging with one
    line, the job keeps serving, and only the damaged file fails (EIO, never wrong bytes). With --strict-staging
    every rank stops before "ready"."""
    ctx.pack(parts=4)
    damage_partition(ctx, "part-00001.fsp")
    job = Job(ctx, 4, "--cleanup")
    job.wait_ready(staged=False)
    out = job.wait_output(lambda o: "staging failed on" in o, 60)
    check("fanstore serve: staging failed on 1 of 4 ranks" in out, "no line saying staging failed:\n" + out)
    # `wait --staged` fails at once, saying so: not every partition will be staged (it passed).
    w = subprocess.run([ctx.args.fanstore, "wait", ctx.sock(0), "--staged", "--timeout", "60"],
                       capture_output=True, text=True, timeout=120)
    check(w.returncode == 1 and w.stderr.count("\n") == 1 and "will not be staged: staging failed on some ranks"
          in w.stderr, f"wait --staged after a failed staging: exit {w.returncode}: {w.stderr}")
    # The line rank 0's points to: the failed rank's own, saying why (it said nothing without --strict-staging).
    check(len(re.findall(r"rank \d\]: staging failed here: .*partition 1", out)) == 1,
          "the failed rank must say why in one line:\n" + out)
    r = ctx.run_check(0, "--threads", "2", "--tolerate-eio")
    m = re.search(r"(\d+) ok, (\d+) mismatched, (\d+) EIO", r.stdout)
    check(m is not None, "no summary from the client")
    ok, bad, eio = map(int, m.groups())
    check(bad == 0 and 1 <= eio <= 2, f"the damaged file (and no other) must fail with EIO: {r.stdout}")
    job.stop()

    job = Job(ctx, 4, "--cleanup", "--strict-staging", wrap_exit=True)
    rc = job.wait(timeout=120)
    out = job.output()
    log(f"--strict-staging: mpirun exit {rc}")
    check("ready:" not in out, "--strict-staging must not become ready after a failed staging:\n" + out)
    check("every rank stops (--strict-staging)" in out, "no line saying every rank stops:\n" + out)
    check("they serve what they have" not in out, "--strict-staging also said the ranks go on serving:\n" + out)
    check(len(re.findall(r"rank \d exit 1", out)) == 4, "every rank must exit 1:\n" + out)

    # The same while rank 2's read of the image directory hangs, as on a stopped sshfs or NFS server: its partition
    # is a link into a FUSE mount whose server is stopped (SIGSTOP) once the file's attributes are cached (stat
    # works, open and read hang). Every rank still stops, rank 2 after leaving its read behind for 2 s.
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        log("hung read: SKIPPED (no /dev/fuse or fusermount3)")
        return
    hung = os.path.join(ctx.img, "part-00002.fsp")
    holder, mnt = os.path.join(ctx.work, "holder"), os.path.join(ctx.work, "hung-mnt")
    os.makedirs(os.path.join(ctx.work, "holder-src"))
    os.replace(hung, os.path.join(ctx.work, "holder-src", "part-00002.fsp"))
    subprocess.run([ctx.args.fanstore, "pack", os.path.join(ctx.work, "holder-src"), "-o", holder, "--level", "0"],
                   check=True, capture_output=True)
    os.makedirs(mnt)
    server = subprocess.Popen([ctx.args.fanstore, "mount", "-f", "--image", holder, mnt])
    try:
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(mnt, "part-00002.fsp")):
            check(time.time() < deadline and server.poll() is None, "fanstore mount of the holder did not come up")
            time.sleep(0.05)
        os.symlink(os.path.join(mnt, "part-00002.fsp"), hung)
        os.stat(hung)
        server.send_signal(signal.SIGSTOP)
        t0 = time.time()
        job = Job(ctx, 4, "--cleanup", "--strict-staging", wrap_exit=True)
        rc = job.wait(timeout=120)
        out = job.output()
        log(f"--strict-staging with a hung read on rank 2: mpirun exit {rc} after {time.time() - t0:.1f} s")
        check("ready:" not in out and "every rank stops (--strict-staging)" in out, out)
        check(len(re.findall(r"rank \d exit 1", out)) == 4, "every rank must exit 1:\n" + out)
        check("did not return within 2 s of every rank stopping; leaving it behind" in out,
              "rank 2 must say it left its hung read behind:\n" + out)
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        if os.path.islink(hung):
            os.remove(hung)
        os.replace(os.path.join(ctx.work, "holder-src", "part-00002.fsp"), hung)


def case_staging_readers(ctx):
    """--stage-readers 1 on 4 ranks: one rank reads the image directory at a time, in rank order; the bytes read
    still add up to the image once, and the copies are right."""
    ctx.pack(parts=8)
    total = sum(len(b) for b in image_parts(ctx).values())
    job = Job(ctx, 4, "--replicas", "2", "--stage-readers", "1", "--stage-piece", "64K", "--cleanup")
    job.wait_ready()
    check_staged_copies(ctx, 4, 2)
    job.stop()
    got = staging_bytes(job.output(), 4)
    check(sum(got.values()) == total, f"staging read {got}, the partitions hold {total}")
