"""Security and resource cases: the socket is the owner's only (0600 whatever the umask; SO_PEERCRED checked
even when its mode is widened behind the daemon's back; --group lets a group in), staged files keep the image's
permissions, a second `fanstore serve` on a --local in use is refused before it writes anything, and a client
that pipelines fetches without reading or opens thousands of idle connections pins bounded memory and fds, and a
fetch whose offset + length wraps past 2^64 is an error reply, with or without the fetch cache.

The other-user checks run a client as uid 65534 with setpriv (root only: skipped with a message otherwise)."""
import hashlib
import os
import re
import resource
import shutil
import socket
import stat
import struct
import subprocess

from mpi_harness import Job, Skip, check, counters, log, parts_of

NOBODY = 65534


def as_user(cmd, groups=None):
    """`cmd` as uid/gid 65534 (with supplementary `groups`, or none)."""
    g = ["--groups", ",".join(str(x) for x in groups)] if groups else ["--clear-groups"]
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY)] + g + ["--"] + cmd


def can_switch_user():
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def case_security(ctx):
    ctx.pack(parts=4)
    # A private image: 0600 files in a 0700 directory.
    os.chmod(ctx.img, 0o700)
    for f in os.listdir(ctx.img):
        os.chmod(os.path.join(ctx.img, f), 0o600)
    # The sockets live in a directory everybody may traverse, so only their own mode guards them.
    os.chmod(ctx.work, 0o755)
    socks = [os.path.join(ctx.work, f"s{r}.sock") for r in range(2)]
    old = os.umask(0)  # the daemon must not depend on the caller's umask
    try:
        job = Job(ctx, 2, "--socket", os.path.join(ctx.work, "s{rank}.sock"))
    finally:
        os.umask(old)
    job.wait_ready(socks=socks)
    for r in range(2):
        check(mode(socks[r]) == 0o600, f"socket of rank {r} is {oct(mode(socks[r]))}, expected 0o600 (umask 000)")
        check(mode(ctx.node(r)) == 0o700, f"staging directory of rank {r} is {oct(mode(ctx.node(r)))}, expected the "
                                          "image directory's 0o700")
        for f in parts_of(ctx.node(r)) + ["index.fsi"]:
            p = os.path.join(ctx.node(r), f)
            check(mode(p) == 0o600, f"staged {f} of rank {r} is {oct(mode(p))}, expected the image's 0o600")
    log("umask 000: sockets 0600, staged files 0600 in a 0700 directory, as the image")
    if not can_switch_user():
        job.stop()
        raise Skip("not root (or no setpriv): the other-user checks need to run a client as uid 65534")
    # Refusals retry until the deadline, so it is short; an allowed client returns on its first answer (a loaded
    # machine may take more than a second to give one).
    def wait_cmd(timeout):
        return [ctx.args.fanstore, "wait", socks[0], "--timeout", str(timeout)]
    wait = wait_cmd(3)
    r = subprocess.run(as_user(wait), capture_output=True, text=True, env=ctx.env)
    log(f"uid {NOBODY} on the 0600 socket -> rc {r.returncode}: {r.stderr.strip()}")
    check(r.returncode != 0 and "Permission denied" in r.stderr, "another user must not connect to a 0600 socket")
    # Widened behind the daemon's back (a careless chmod): SO_PEERCRED still keeps the other user out.
    os.chmod(socks[0], 0o666)
    r = subprocess.run(as_user(wait), capture_output=True, text=True, env=ctx.env)
    log(f"uid {NOBODY} on a socket chmod'ed 0666 -> rc {r.returncode}: {r.stderr.strip()}")
    check(r.returncode != 0 and "may not use this daemon" in r.stderr,
          "the daemon must refuse a uid it does not serve, with the reason")
    check(ctx.run_check(0, "--which", "remote", sock=socks[0]).returncode == 0, "the owner must still be served")
    job.stop()
    c = counters(job.output(), 0)
    check(c and c["connections refused"] >= 1, "the refusal must be counted")

    # --group: members get in (0660 socket of that group), others do not.
    group = 1  # `daemon` on Debian; any group other than ours and nobody's will do
    job = Job(ctx, 2, "--socket", os.path.join(ctx.work, "s{rank}.sock"), "--group", str(group))
    job.wait_ready(socks=socks)
    st = os.stat(socks[0])
    check(stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == group,
          f"with --group the socket must be 0660 and of gid {group}: {oct(st.st_mode)} gid {st.st_gid}")
    r = subprocess.run(as_user(wait_cmd(10), groups=[group]), capture_output=True, text=True, env=ctx.env)
    log(f"uid {NOBODY} in group {group} -> rc {r.returncode}: {r.stderr.strip()}")
    check(r.returncode == 0, "a member of --group must be allowed")
    r = subprocess.run(as_user(wait), capture_output=True, text=True, env=ctx.env)
    check(r.returncode != 0, "a user outside --group must not get in")
    job.stop()

    # --socket-mode sets the bits whatever the umask: 0640 leaves the group read only, and connecting to a Unix
    # socket needs write, so even a member of --group is kept out by the kernel.
    old = os.umask(0o077)
    try:
        job = Job(ctx, 2, "--socket", os.path.join(ctx.work, "s{rank}.sock"), "--group", str(group),
                  "--socket-mode", "0640")
    finally:
        os.umask(old)
    job.wait_ready(socks=socks)
    check(mode(socks[0]) == 0o640, f"--socket-mode 0640 gave {oct(mode(socks[0]))}")
    r = subprocess.run(as_user(wait, groups=[group]), capture_output=True, text=True, env=ctx.env)
    log(f"uid {NOBODY} in group {group} on a 0640 socket -> rc {r.returncode}: {r.stderr.strip()}")
    check(r.returncode != 0 and "Permission denied" in r.stderr, "a 0640 socket must not let the group connect")
    job.stop()


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(dirs):
    """path -> (inode, mtime, content digest) of what the directories hold."""
    out = {}
    for d in dirs:
        for f in os.listdir(d):
            p = os.path.join(d, f)
            st = os.lstat(p)
            out[p] = (st.st_ino, st.st_mtime_ns, digest(p) if stat.S_ISREG(st.st_mode) else None)
    return out


def case_lock(ctx):
    """A second job on the same --local is refused by every rank before it writes anything; the running job's
    index and partitions are untouched and it keeps serving."""
    ctx.pack(parts=4)
    job = Job(ctx, 2)
    job.wait_ready()
    before = snapshot(ctx.node(r) for r in range(2))
    # Another dataset, same --local: what the old daemon staged over the running job's index.
    other = os.path.join(ctx.work, "other")
    os.makedirs(os.path.join(other, "x"))
    with open(os.path.join(other, "x", "y.bin"), "wb") as f:
        f.write(b"another dataset" * 1000)
    r = subprocess.run([ctx.args.fanstore, "pack", other, "-o", os.path.join(ctx.work, "img2"), "--parts", "2"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, r.stderr)
    second = Job(ctx, 2, "--socket", os.path.join(ctx.work, "second{rank}.sock"), "--cleanup", wrap_exit=True,
                 image=os.path.join(ctx.work, "img2"))
    second.wait(120)
    out = second.output()
    log("second job:\n" + out.strip())
    exits = dict(re.findall(r"rank (\d) exit (\d+)", out))
    check(len(exits) == 2 and all(v != "0" for v in exits.values()), f"every rank of the second job must fail: {exits}")
    check(len(re.findall(r"is in use by another `fanstore serve`", out)) == 2, "each rank must say the directory is in use")
    after = snapshot(ctx.node(r) for r in range(2))
    check(after == before, "the second job changed the running job's files")
    check(not any(os.path.exists(os.path.join(ctx.work, f"second{r}.sock")) for r in range(2)),
          "the refused job left a socket")
    r = ctx.run_check(0)
    check(r.returncode == 0, "the running job must keep serving")
    job.stop()

    # Two ranks of one node given the same --socket (and their own --local): the second rename must not replace
    # the first rank's socket (both used to say "ready" while one daemon was unreachable).
    shared = os.path.join(ctx.work, "shared.sock")
    clash = Job(ctx, 2, "--socket", shared, local=os.path.join(ctx.work, "clash{rank}"), wrap_exit=True)
    clash.wait(120)
    out = clash.output()
    log("same --socket on two ranks:\n" + out.strip())
    exits = dict(re.findall(r"rank (\d) exit (\d+)", out))
    check(len(exits) == 2 and all(v != "0" for v in exits.values()), f"every rank must stop: {exits}")
    check("a daemon is already serving at " + shared in out and "ready:" not in out,
          "one rank must say the socket is taken, and the job must not become ready")
    check(not os.path.exists(shared), "the refused job left its socket")
    # A --socket of 107 bytes, the most a Unix socket path holds, works whatever the rank's pid: the check was
    # made on the temporary name PATH.starting.PID, so paths well under the limit were refused (naming that
    # temporary name). Here the temporary name does not fit even in short form: it is bound through the directory.
    longdir = os.path.join(ctx.work, "d" * max(1, 99 - len(ctx.work) - 1))
    os.makedirs(longdir)
    tmpl = os.path.join(longdir, "s{rank}.sock")
    longs = [tmpl.replace("{rank}", str(r)) for r in range(2)]
    check(all(len(p) == 107 for p in longs), f"test setup: {[len(p) for p in longs]}")
    job = Job(ctx, 2, "--socket", tmpl, local=os.path.join(ctx.work, "long{rank}"))
    job.wait_ready(socks=longs)
    check(sorted(os.listdir(longdir)) == ["s0.sock", "s1.sock"], f"left in the directory: {os.listdir(longdir)}")
    check(mode(longs[0]) == 0o600, f"a socket bound through its directory is {oct(mode(longs[0]))}")
    r = ctx.run_check(0, sock=longs[0])
    check(r.returncode == 0, "a client must read through a 107-byte socket path")
    # The same socket named by a longer path (109 bytes, "/./" in it), as a relative --socket's absolute path can be:
    # the client connects through its directory, as the daemon binds (it said "longer than 107 bytes").
    r = ctx.run_check(0, sock=os.path.join(longdir, ".", "s0.sock"))
    check(r.returncode == 0, "a client must read through a socket path longer than 107 bytes")
    # A path that is no socket: said so (it was "Connection refused").
    r = ctx.run_check(0, sock=os.path.join(ctx.work, "long0", "index.fsi"))
    check(r.returncode != 0 and "is not a socket: give the --socket path" in r.stderr,
          f"a client given a file that is no socket: {r.stderr}")
    job.stop()
    check(os.listdir(longdir) == [], f"sockets left after stop: {os.listdir(longdir)}")
    # One byte more: one line naming the user's path and the limit, before anything is staged.
    toolong = os.path.join(longdir, "s{rank}x.sock")
    over_local = os.path.join(ctx.work, "over{rank}")
    over = Job(ctx, 1, "--socket", toolong, local=over_local, wrap_exit=True)
    over.wait(120)
    out = over.output()
    check(f"socket path {toolong.replace('{rank}', '0')} is 108 bytes; a Unix socket path holds at most 107: give a "
          "shorter --socket" in out and ".starting." not in out, "a 108-byte --socket:\n" + out)
    check(os.listdir(longdir) == [], f"a refused --socket left {os.listdir(longdir)}")
    staged = staged_files(over_local)
    check(staged == [], f"a --socket too long was refused only after staging {staged}")
    # The same for the default socket, --local/fanstore.sock, under a --local too long for it.
    deep = os.path.join(longdir, "l{rank}")
    over = Job(ctx, 1, local=deep, wrap_exit=True)
    over.wait(120)
    out = over.output()
    check(f"socket path {deep.replace('{rank}', '0')}/fanstore.sock is " in out and "give a shorter --socket" in out,
          "a --local too long for its default socket:\n" + out)
    staged = staged_files(deep)
    check(staged == [], f"a --local too long for its socket was refused only after staging {staged}")
    # A --socket in a directory that does not exist: one line naming it, before anything is staged (bind failed only
    # after staging, naming its temporary name).
    nodir = os.path.join(ctx.work, "no-such-dir", "s{rank}.sock")
    nodir_local = os.path.join(ctx.work, "nodir{rank}")
    over = Job(ctx, 1, "--socket", nodir, local=nodir_local, wrap_exit=True)
    over.wait(120)
    out = over.output()
    check(f"the directory of socket {nodir.replace('{rank}', '0')} cannot be used (No such file or directory): "
          "create it" in out and ".starting." not in out, "a --socket in a missing directory:\n" + out)
    staged = staged_files(nodir_local)
    check(staged == [], f"a --socket in a missing directory was refused only after staging {staged}")
    # A --local holding another image (no daemon staged it: no .fanstore-staged) is refused before anything is
    # written there: staging renamed its files over that image's, and --cleanup then deleted them.
    other = os.path.join(ctx.work, "other-image")
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", other, "--parts", "1"], capture_output=True, text=True)
    check(r.returncode == 0, r.stderr)
    before = {f: os.path.getsize(os.path.join(other, f)) for f in os.listdir(other)}
    over = Job(ctx, 1, "--cleanup", local=other, wrap_exit=True)
    over.p.wait(timeout=60)
    out = over.output()
    check("holds an image (index.fsi) that no `fanstore serve` staged there" in out, out)
    after = {f: os.path.getsize(os.path.join(other, f)) for f in os.listdir(other)}
    check(after == before, f"the other image changed: {before} -> {after}")


def hostile_pipeline(sock_path, part, offset, length, n):
    """A client that sends a hello and `n` fetches without ever reading a reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)

    def req(kind, rid, p=0, off=0, ln=0):
        return struct.pack("<IHHQIIQQQ", 0x51445346, 2, kind, rid, p, 0, off, ln, 0)

    s.sendall(req(1, 1))
    s.setblocking(False)
    sent = 0
    for i in range(n):
        try:
            s.send(req(2, i + 2, part, offset, length))
            sent += 1
        except BlockingIOError:
            break
    return s, sent


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def memfd_maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if "memfd:" in line)


def case_limits(ctx):
    """One connection pipelining thousands of fetches it never reads, and 2,000 idle connections: the daemon's
    fds and shared mappings stay bounded and other clients are served."""
    ctx.pack(parts=4, sizes=(300000,))
    job = Job(ctx, 2, "--cache-bytes", "0")
    job.wait_ready()
    pid = job.pids()[0]
    check(ctx.run_check(0).returncode == 0, "reads before the flood failed")
    base_fds, base_maps = fd_count(pid), memfd_maps(pid)
    # A range of partition 1, which rank 1 holds: remote for rank 0 (the daemon knows only byte ranges).
    hostile = []
    total = 0
    for _ in range(4):
        s, sent = hostile_pipeline(ctx.sock(0), 1, 4096, 300000, 20000)
        hostile.append(s)
        total += sent
    # Let the daemon work through what it can (a normal client's full read takes longer than that).
    check(ctx.run_check(0, "--threads", "2").returncode == 0, "a normal client must be served during the flood")
    fds, maps = fd_count(pid), memfd_maps(pid)
    log(f"4 connections pipelined {total} fetches without reading: daemon fds {base_fds} -> {fds}, "
        f"memfd mappings {base_maps} -> {maps}")
    check(fds <= base_fds + 4 + 2, "fds must stay bounded (one socket per connection, no fd per queued reply)")
    check(maps <= base_maps + 4 + 2, "shared memory must stay bounded (one reply area per connection)")
    for s in hostile:
        s.close()
    # 2,000 idle connections.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    idle = []
    for _ in range(min(2000, want - 100)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(ctx.sock(0))
        idle.append(s)
    check(ctx.run_check(0, "--threads", "2").returncode == 0, "a client must be served next to 2,000 idle connections")
    log(f"{len(idle)} idle connections: daemon fds {fd_count(pid)}, memfd mappings {memfd_maps(pid)}")
    check(memfd_maps(pid) <= base_maps + 4 + 2, "idle connections must not pin shared memory")
    for s in idle:
        s.close()
    job.stop()


def staged_files(local_tmpl):
    """What rank 0 staged into `local_tmpl` ({rank} = 0): the index and partition files."""
    return [f for f in os.listdir(local_tmpl.replace("{rank}", "0")) if f.startswith(("index", "part-"))]


def fetch_once(sock_path, part, offset, length, timeout, flags=0):
    """One fetch on a fresh connection; returns (code, message), or None when no reply came within `timeout`.
    flags 1: kFromSource (the bytes this node gave failed their checksum)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    try:
        s.sendall(struct.pack("<IHHQIIQQQ", 0x51445346, 2, 2, 7, part, flags, offset, length, 0))
        head = b""
        while len(head) < 48:
            chunk = s.recv(48 - len(head))
            if not chunk:
                return None
            head += chunk
        _, _, _, rid, code, msg_len, _, _, _, _ = struct.unpack("<IHHQIIQIIQ", head)
        return code, s.recv(msg_len).decode(errors="replace") if msg_len else ""
    except socket.timeout:
        return None
    finally:
        s.close()


def case_no_memory(ctx):
    """A daemon that cannot map memory for a reply (an address-space limit, as Slurm's VSizeFactor sets) answers
    with an error at once, never leaves the client waiting out its timeout, and serves again once it can."""
    import random
    os.makedirs(os.path.join(ctx.src, "big"))
    rnd = random.Random(5)
    for i in range(8):
        with open(os.path.join(ctx.src, "big", f"b{i}.bin"), "wb") as f:
            f.write(rnd.randbytes(3 << 20))
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", ctx.img, "--parts", "2"], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, r.stderr)
    job = Job(ctx, 2, "--timeout", "30")
    job.wait_ready()
    pid = job.pids()[0]
    check(fetch_once(ctx.sock(0), 0, 0, 4096, 30) == (0, ""), "a small fetch of a staged range must work")
    # A range of partition 0 (staged on rank 0: the daemon reads it itself) bigger than what is left to map.
    with open(f"/proc/{pid}/status") as f:
        vm = int(re.search(r"VmSize:\s+(\d+) kB", f.read()).group(1)) * 1024
    limits = resource.prlimit(pid, resource.RLIMIT_AS)
    resource.prlimit(pid, resource.RLIMIT_AS, (vm + (4 << 20), limits[1]))
    try:
        got = fetch_once(ctx.sock(0), 0, 0, 8 << 20, 20)
    finally:
        resource.prlimit(pid, resource.RLIMIT_AS, limits)
    log(f"8 MiB fetch under an address-space limit -> {got}")
    check(got is not None, "no reply: the daemon left the client waiting (it used to, until the client's timeout)")
    check(got[0] != 0 and "memory" in got[1], f"expected an out-of-memory error: {got}")
    check(fetch_once(ctx.sock(0), 0, 0, 8 << 20, 30) == (0, ""), "the daemon must serve again once it can map")
    job.stop()


def case_hostile_range(ctx):
    """A client on the socket asks for offset 2^64 - L + 100, length L (the sum wraps): with the fetch cache holding
    every remote partition's bytes and with no cache, each such fetch gets an error reply (never success, never a
    crash: `fanstore serve` answered L = 200 with bytes from outside the cached range and died with SIGSEGV at
    L = 256 MiB), and the daemons go on serving."""
    ctx.pack(parts=4)
    for cache in ("64MiB", "0"):
        job = Job(ctx, 4, "--cache-bytes", cache, "--timeout", "30")
        job.wait_ready()
        pids = job.pids()
        # Every file read through rank 0: partitions 1-3 are remote there, and with a cache they are now in it.
        check(ctx.run_check(0).returncode == 0, "reads before the hostile fetches failed")
        for part in (1, 2, 3):
            for length in (200, 1 << 20, 256 << 20):
                got = fetch_once(ctx.sock(0), part, (1 << 64) - length + 100, length, 30)
                log(f"--cache-bytes {cache}: part {part}, offset 2^64-{length}+100, length {length} -> {got}")
                check(got is not None, "no reply (the daemon died or hung)")
                check(got[0] != 0, f"a fetch whose end wraps past 2^64 succeeded: {got}")
        # Asking again "from the source" is for one chunk's stored bytes: 1 GiB is refused before any read or
        # allocation (it went to the image directory whole).
        got = fetch_once(ctx.sock(0), 1, 0, 1 << 30, 30, flags=1)
        log(f"--cache-bytes {cache}: part 1, 1 GiB from the source -> {got}")
        check(got is not None and got[0] != 0 and "one chunk's stored bytes" in got[1], f"1 GiB from the source: {got}")
        alive = job.pids()
        check(alive == pids, f"a daemon died: ranks {sorted(pids)} -> {sorted(alive)}")
        check(ctx.run_check(0).returncode == 0, "the daemon must serve other clients after the hostile fetches")
        check(job.p.poll() is None, "the job ended")
        job.stop()
        out = job.output()
        check("rank 0]: stopping on" in out, "rank 0 printed no exit line:\n" + out)
