"""Multi-host for real: four network namespaces joined by veths on a bridge (scripts/netns-hosts.sh), one
`fanstore serve` per namespace, Open MPI over TCP between them (mpirun starts an orted in each namespace). Every
file read through one node's daemon matches the source (replies over 64 KiB travel as 64 KiB chunks), and staging
read each byte of the image directory once (--replicas 2, pieces sent between the hosts over TCP); then one "host"
is SIGKILLed: its files are read from the image directory after one timeout, the other hosts keep serving and stop
cleanly.
Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2, a container without
CAP_SYS_ADMIN)."""
import os
import re
import signal
import subprocess

from mpi_harness import PEER_TIMEOUT_S, Job, Skip, check, counters, log, wait_gone

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "netns-hosts.sh"))
HOSTS = 4


def up(ctx, tag):
    d = os.path.join(ctx.work, "netns")
    r = subprocess.run([NETNS, "up", tag, str(HOSTS), d], capture_output=True, text=True, timeout=60)
    if r.returncode == 77:
        raise Skip(r.stderr.strip())
    check(r.returncode == 0, f"netns-hosts.sh up failed: {r.stderr}")
    ctx.cleanups = getattr(ctx, "cleanups", []) + [
        lambda: subprocess.run([NETNS, "down", tag, str(HOSTS)], capture_output=True, timeout=60)]
    with open(os.path.join(d, "mpirun")) as f:
        return [line for line in f.read().splitlines() if line]


def case_netns(ctx):
    prefix = up(ctx, f"t{os.getpid()}")
    ctx.pack(parts=8)
    timeout = PEER_TIMEOUT_S
    # --max-message 65536: replies over 64 KiB travel as several chunks over TCP, where MPI may complete receives out
    # of order (the transport takes a reply's chunks one at a time so that it is whole when the last one is in).
    job = Job(ctx, HOSTS, "--timeout", str(timeout), "--cache-bytes", "0", "--max-message", "65536",
              "--replicas", "2", "--stage-piece", "64K",
              launcher=prefix + ["-np", str(HOSTS)], mpirun_extra=("--mca", "orte_abort_on_non_zero_status", "0"))
    job.wait_ready()
    out = job.output()
    # Each rank really sits in its own namespace: its network namespace differs from every other rank's.
    pids = job.pids()
    check(len(pids) == HOSTS, f"found daemons {pids}:\n{out}")
    nets = {r: os.readlink(f"/proc/{p}/ns/net") for r, p in pids.items()}
    check(len(set(nets.values())) == HOSTS, f"ranks share network namespaces: {nets}")
    for rank in (0, 2):
        r = ctx.run_check(rank, "--threads", "2")
        check(r.returncode == 0, f"reading every file through rank {rank} over TCP failed")
        m = re.search(r"\((\d+) local, (\d+) remote\)", r.stdout)
        check(m and int(m.group(2)) > 0, "expected remote files")
    os.kill(pids[1], signal.SIGKILL)
    wait_gone(pids[1])
    log(f"SIGKILLed the daemon of host 1 (pid {pids[1]})")
    r = ctx.run_check(0, "--threads", "4", "--max-seconds", "60")
    check(r.returncode == 0, "after host 1 died: its files must read right (from the image directory), and the rest")
    r = ctx.run_check(3, "--threads", "2", "--max-seconds", "60")
    check(r.returncode == 0, "host 3 must keep serving")
    job.stop()
    out = job.output()
    check(len(re.findall(r"stopping on", out)) == HOSTS - 1, "the surviving hosts must stop cleanly:\n" + out[-3000:])
    c = counters(out, 0)
    log(f"rank 0 daemon: {c}")
    check(c["peers down"] == 1 and c["timeouts"] <= 4, "host 1 must be declared down once")
    # Host 1 has no exit line: the tally (rounded to 0.1 MiB) stands for the four.
    total = sum(os.path.getsize(os.path.join(ctx.img, f)) for f in os.listdir(ctx.img) if f.endswith(".fsp"))
    m = re.search(r"staged: 4 ranks, .*?; ([\d.]+) MiB read from the image directory", out)
    check(m and abs(float(m.group(1)) - total / 2**20) < 0.06,
          f"staging must read the image's {total} partition bytes once over the hosts:\n{out}")
    # Doorbells cross the namespaces: each rank advertised its veth address, and the hosts that served rank 0's
    # and rank 2's reads heard them.
    for rank in (0, 2, 3):
        c = counters(out, rank)
        check(c["doorbells heard"] > 0 and c["doorbells rung"] > 0, f"rank {rank} doorbells: {c}")
