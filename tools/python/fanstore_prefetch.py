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


def image_relative(path, mount=None, cwd=None):
    """The image-relative form of `path` ("/fanstore/train/x.jpg" -> "train/x.jpg"); None for an absolute path
    outside the mount. A relative path is one from `cwd` (the working directory) when that lies under the mount, as
    the program opening it means it; otherwise it is taken as image-relative already."""
    path = os.fsdecode(path)  # bytes too; a name that is not UTF-8 stays surrogate-escaped until os.fsencode
    mount = (mount or _mount()).rstrip("/")
    if not path.startswith("/"):
        if cwd is not None and (cwd == mount or cwd.startswith(mount + "/")):
            path = os.path.join(cwd, path)
        else:
            return os.path.normpath(path).lstrip("/")
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
    try:
        cwd = os.getcwd()  # under `fanstore run`, the directory of the image the program is in
    except OSError:
        cwd = None
    for p in paths:
        r = image_relative(p, mount, cwd)
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
    """File paths by index of a torchvision-style dataset (`samples` or `imgs` of (path, target)), of a Subset
    (random_split's) or ConcatDataset of such datasets, or of a list or tuple of paths. TypeError for anything else:
    listing a dataset would load every sample; give HintingSampler the paths yourself (a list, or index -> path)."""
    for attr in ("samples", "imgs"):
        items = getattr(dataset, attr, None)
        if items is not None:
            return [p for p, *_ in items]
    if hasattr(dataset, "dataset") and hasattr(dataset, "indices"):  # torch.utils.data.Subset
        inner = paths_of(dataset.dataset)
        return [inner[i] for i in dataset.indices]
    if hasattr(dataset, "datasets") and hasattr(dataset, "cumulative_sizes"):  # torch.utils.data.ConcatDataset
        return [p for d in dataset.datasets for p in paths_of(d)]
    if isinstance(dataset, (list, tuple)) and all(isinstance(p, (str, bytes, os.PathLike)) for p in dataset):
        return list(dataset)
    raise TypeError(f"paths_of: no file paths in a {type(dataset).__name__} (it has no `samples` or `imgs`, and is "
                    "no Subset, ConcatDataset or list of paths): give HintingSampler a list of paths, or a "
                    "function index -> path")


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
        self._warned_useless = False  # a hint with no file of the image was reported
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
            hinted = [os.fsdecode(path(i)) for i in order]
        except Exception as e:  # a hint is an optimisation: paths it cannot make must not end the training
            if not self._warned:
                print(f"fanstore_prefetch: no prefetch hints: the paths of the epoch's samples failed ({e!r})",
                      file=sys.stderr)
                self._warned = True
            return iter(order)
        try:
            self.last = send_hint(hinted, self.socket_path, self.stream, self.mount, self.timeout)
            useless = self.last["remote"] + self.last["local"] == 0 and len(hinted) > 0
            if useless and not self._warned_useless:
                print(f"fanstore_prefetch: none of the {len(hinted)} paths hinted is a file of the image "
                      f"({self.last['outside']} outside the mount {self.mount or _mount()}, {self.last['missing']} "
                      "not files of the image): the hints do nothing; give the paths under the mount",
                      file=sys.stderr)
                self._warned_useless = True
        except (OSError, ValueError) as e:
            # socket.timeout is TimeoutError from Python 3.10 on, only an OSError before
            self._silent_daemon = isinstance(e, (TimeoutError, socket.timeout))
            if not self._warned:
                where = self.socket_path or os.environ.get("FANSTORE_DAEMON") or "(FANSTORE_DAEMON is not set)"
                after = "; no more hints from this sampler" if self._silent_daemon else ""
                print(f"fanstore_prefetch: no prefetch hints from the daemon at {where} ({e}){after}", file=sys.stderr)
                self._warned = True
        return iter(order)
