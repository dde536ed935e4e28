#!/usr/bin/python3
"""Reads a tree the way Python training code does and prints a report with paths relative to ROOT."""
import hashlib
import os
import stat
import sys

import h5py
import numpy as np
from PIL import Image

root = sys.argv[1]
out = []


def rel(p):
    return os.path.relpath(p, root)


# os.walk (scandir + d_type underneath), sorted for a stable order.
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    out.append("walk %r dirs=%r files=%r" % (rel(dirpath), dirnames, sorted(filenames)))
    for name in sorted(filenames):
        p = os.path.join(dirpath, name)
        st = os.stat(p)
        with open(p, "rb") as f:
            digest = hashlib.md5(f.read()).hexdigest()
        out.append("file %r mode=%o size=%d mtime_ns=%d nlink=%d md5=%s" % (
            rel(p), st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, digest))

# os.scandir: d_type answers is_dir/is_file without a stat.
for dirpath, dirnames, _ in os.walk(root):
    dirnames.sort()
    with os.scandir(dirpath) as it:
        ents = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it)
    out.append("scandir %r %r" % (rel(dirpath), ents))

# Python's own fd paths: os.open/os.read, os.fstat, buffered text reading, seek/tell.
p = os.path.join(root, "text", "lorem.txt")
fd = os.open(p, os.O_RDONLY)
out.append("os.read %r fstat_size=%d" % (hashlib.md5(os.read(fd, 1 << 22)).hexdigest(), os.fstat(fd).st_size))
os.close(fd)
with open(p, "r") as f:
    f.seek(100)
    out.append("text %r tell=%d" % (f.readline(), f.tell()))

sci = os.path.join(root, "sci")
a = np.load(os.path.join(sci, "array.npy"))
out.append("npy %s %s %.10f" % (a.shape, a.dtype, float(a.sum())))
m = np.load(os.path.join(sci, "array.npy"), mmap_mode="r")
out.append("npy-mmap %s %.10f" % (m.shape, float(np.asarray(m).sum())))
z = np.load(os.path.join(sci, "bundle.npz"))
out.append("npz %s %d %d" % (sorted(z.files), int(z["a"].sum()), int(z["b"].sum())))
r = np.fromfile(os.path.join(sci, "raw.f64"), dtype=np.float64)
out.append("fromfile %d %.10f" % (r.size, float(r.sum())))
mm = np.memmap(os.path.join(sci, "raw.f64"), dtype=np.float64, mode="r")
out.append("memmap %d %.10f" % (mm.size, float(mm[::7].sum())))
with h5py.File(os.path.join(sci, "volume.h5"), "r") as f:
    x = f["x"][3:5, :, 2:9, :]
    out.append("h5 %s %s %.8f %s %s" % (sorted(f.keys()), x.shape, float(x.sum()), list(f["y"][:]), f.attrs["note"]))
for name in ["picture.png", "gray.jpg"]:
    with Image.open(os.path.join(sci, name)) as im:
        im.load()
        out.append("pil %s %s %s %s" % (name, im.size, im.mode, hashlib.md5(im.tobytes()).hexdigest()))

# Errors Python sees.
for bad in ["missing-file", "empty.txt/below"]:
    try:
        os.stat(os.path.join(root, bad))
    except OSError as e:
        out.append("stat %s -> %s" % (bad, type(e).__name__))

print("\n".join(out))
