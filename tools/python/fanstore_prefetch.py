"""Clairvoyant prefetch for FanStore from Python: tell the node's `fanstore serve` daemon which files this process
will read, in order, so it fetches the remote ones ahead into its node RAM cache (every process of the node --
all DataLoader workers -- then finds them there).

No install step and no dependency (PyTorch optional): put tools/python on PYTHONPATH.

    from fanstore_prefetch import HintingSampler, paths_of
    ds = torchvision.datasets.ImageFolder("/fanstore/train")
    sampler = HintingSampler(torch.utils.data.RandomSampler(ds), paths_of(ds))
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=64, num_workers=4)
    # each epoch, iter(loader) -> iter(sampler): this epoch's order goes to the daemon, then the indices

Run it under `fanstore run --daemon SOCKET ...` (which sets FANSTORE_DAEMON), or pass socket_path. Hints are an
optimisation: without a daemon the sampler warns once and yields the same order (and tries again next epoch: a
daemon may start or come back); a daemon that does not answer within `timeout` costs that wait once, after which
the sampler sends no more hints.
The wire format (docs/daemon.md, "prefetch"): a 48-byte little-endian request header and '\n'-separated
image-relative paths; the reply carries four u64 counters.
"""
import os
import socket
import struct
import sys
import zlib

# The wire constants of fanstore/protocol/include/fanstore/protocol/daemon_wire.hpp (test meta.prefetch_py_wire
# checks them against it).
_REQ = struct.Struct("<IHHQQIIQQ")   # magic, version, type, req_id, stream, flags, 0, 0, body_len
_REP = struct.Struct("<IHHQIIQIIQ")  # magic, version, type, req_id, code, msg_len, payload_size, flags, 0, offset
_REQUEST_MAGIC, _REPLY_MAGIC, _VERSION, _PREFETCH, _APPEND = 0x51445346, 0x52445346, 2, 3, 1
_MAX_BODY = 64 << 20
_PREFETCH_REPLY_SIZE = 32
_PERMISSION = 11  # fanstore::Code::kPermission
_NODE_KEY = "{node}"


def expand_node(path):
    """`path` with "{node}" replaced by this node's name (SLURMD_NODENAME, else the host name), as every FanStore
    client expands FANSTORE_DAEMON; ValueError when that name cannot be one path component."""
    if _NODE_KEY not in path:
        return path
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if not node or node in (".", "..") or "/" in node or "\0" in node:
        raise ValueError(f"node name {node!r} cannot replace {{node}} in {path!r} (set SLURMD_NODENAME)")
    return path.replace(_NODE_KEY, node)


def _mount():
    m = os.environ.get("FANSTORE_MOUNT") or "/fanstore"
    return m.rstrip("/") or "/"


def image_relative(path, mount=None):
    """The image-relative form of `path` ("/fanstore/train/x.jpg" -> "train/x.jpg"); relative paths are taken as
    image-relative already; None for an absolute path outside the mount."""
    path = os.fsdecode(path)  # bytes too; a name that is not UTF-8 stays surrogate-escaped until os.fsencode
    if not path.startswith("/"):
        return os.path.normpath(path).lstrip("/")
    mount = (mount or _mount()).rstrip("/")
    norm = os.path.normpath(path)
    if norm == mount or not norm.startswith(mount + "/"):
        return None
    return norm[len(mount) + 1:]


def _recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the fanstore daemon closed the connection")
        buf += chunk
    return bytes(buf)


def send_hint(paths, socket_path=None, stream=0, mount=None, timeout=10.0):
    """Sends the files about to be read, in order, to the daemon at `socket_path` (default $FANSTORE_DAEMON); they
    replace the previous hint of the same `stream`. Returns {"remote", "local", "missing", "outside",
    "remote_bytes"}: files queued for prefetch, staged on this node, not files of the image (absent,
    directories, symlinks: list the files themselves), outside the mount.
    Raises OSError when there is no daemon or it refuses."""
    socket_path = socket_path or os.environ.get("FANSTORE_DAEMON")
    if not socket_path:
        raise FileNotFoundError("no fanstore daemon: FANSTORE_DAEMON is not set (run under `fanstore run --daemon`)")
    socket_path = expand_node(socket_path)
    rels, outside = [], 0
    for p in paths:
        r = image_relative(p, mount)
        if r is None or "\n" in r:
            outside += 1
        else:
            rels.append(os.fsencode(r))  # the name's own bytes, UTF-8 or not
    totals = {"remote": 0, "local": 0, "missing": 0, "outside": outside, "remote_bytes": 0}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        flags, req_id, start = 0, 2, 0
        while True:
            # Bodies over the daemon's limit go in pieces; the later ones append to the stream.
            body, end = bytearray(), start
            while end < len(rels) and len(body) + len(rels[end]) + 1 <= _MAX_BODY:
                body += rels[end] + b"\n"
                end += 1
            s.sendall(_REQ.pack(_REQUEST_MAGIC, _VERSION, _PREFETCH, req_id, stream & (2 ** 64 - 1), flags, 0, 0,
                                len(body)) + bytes(body))
            magic, version, kind, rid, code, msg_len, size, _, _, _ = _REP.unpack(_recv_exact(s, _REP.size))
            if magic != _REPLY_MAGIC or version != _VERSION or kind != _PREFETCH or rid != req_id or size > 4096:
                raise ConnectionError("the fanstore daemon sent a malformed reply (version mismatch?)")
            msg = _recv_exact(s, msg_len).decode(errors="replace") if msg_len else ""
            payload = _recv_exact(s, size) if size else b""
            if code != 0:
                raise PermissionError(msg) if code == _PERMISSION else OSError(msg or f"fanstore daemon error {code}")
            if len(payload) != _PREFETCH_REPLY_SIZE:
                raise OSError(f"fanstore daemon: a prefetch reply of {len(payload)} bytes, not {_PREFETCH_REPLY_SIZE}")
            remote, local, missing, nbytes = struct.unpack("<QQQQ", payload)
            totals["remote"] += remote
            totals["local"] += local
            totals["missing"] += missing
            totals["remote_bytes"] += nbytes
            start, flags, req_id = end, _APPEND, req_id + 1
            if start >= len(rels):
                return totals


def paths_of(dataset):
    """File paths by index of a torchvision-style dataset (`samples` or `imgs` of (path, target)), or of a list."""
    for attr in ("samples", "imgs"):
        items = getattr(dataset, attr, None)
        if items is not None:
            return [p for p, *_ in items]
    return list(dataset)


class HintingSampler:
    """Wraps a sampler (RandomSampler, DistributedSampler, ...): each time an epoch starts (iter), sends the
    epoch's file order to the node's daemon, then yields the same indices. `paths`: file path per dataset index
    (a list, or a callable index -> path)."""

    def __init__(self, sampler, paths, socket_path=None, stream=None, mount=None, timeout=10.0):
        self.sampler = sampler
        self.paths = paths
        self.socket_path = socket_path
        self.mount = mount
        self.timeout = timeout
        # One stream per sampler per process: each epoch's hint replaces the previous one.
        self.stream = stream if stream is not None else zlib.crc32(f"{os.getpid()}:{id(self)}".encode())
        self.last = None  # the daemon's counters for the latest hint
        self._warned = False
        self._silent_daemon = False  # it once let a hint time out: no more waits on it

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        order = list(self.sampler)
        if self._silent_daemon:
            return iter(order)
        path = self.paths if callable(self.paths) else self.paths.__getitem__
        try:
            self.last = send_hint([path(i) for i in order], self.socket_path, self.stream, self.mount, self.timeout)
        except OSError as e:
            # socket.timeout is TimeoutError from Python 3.10 on, only an OSError before
            self._silent_daemon = isinstance(e, (TimeoutError, socket.timeout))
            if not self._warned:
                where = self.socket_path or os.environ.get("FANSTORE_DAEMON") or "(FANSTORE_DAEMON is not set)"
                after = "; no more hints from this sampler" if self._silent_daemon else ""
                print(f"fanstore_prefetch: no prefetch hints from the daemon at {where} ({e}){after}", file=sys.stderr)
                self._warned = True
        return iter(order)
