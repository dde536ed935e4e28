#!/usr/bin/python3
"""Generates the edge-case tree the real-program suite packs and compares: deterministic for a given seed."""
import os
import random
import shutil
import sys

import h5py
import numpy as np
from PIL import Image


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1]
    rng = random.Random(1234)
    nrng = np.random.default_rng(1234)
    os.makedirs(root, exist_ok=True)

    # Empty things.
    write(os.path.join(root, "empty.txt"), b"")
    os.makedirs(os.path.join(root, "emptydir"), exist_ok=True)
    os.makedirs(os.path.join(root, "nested", "empty", "deeper"), exist_ok=True)
    write(os.path.join(root, "nested", "empty", "zero.bin"), b"")

    # Names that break naive tools.
    write(os.path.join(root, "names", "with space.txt"), b"space\n")
    write(os.path.join(root, "names", "  leading and trailing  "), b"blanks\n")
    write(os.path.join(root, "names", "ünïcödé-日本語-ёж.txt"), "unicode ✓\n".encode())
    write(os.path.join(root, "names", "new\nline.txt"), b"newline in the name\n")
    write(os.path.join(root, "names", "-dash-first"), b"dash\n")
    write(os.path.join(root, "names", "x" * 255), b"NAME_MAX\n")
    write(os.path.join(root, "names", ".hidden"), b"hidden\n")

    # A deep tree and a long path (about 1500 bytes).
    deep = os.path.join(root, "deep", *["d%02d" % i for i in range(40)])
    write(os.path.join(deep, "bottom.txt"), b"bottom\n")
    long_dir = os.path.join(root, "long", *[("seg%02d-" % i) + "y" * 90 for i in range(15)])
    write(os.path.join(long_dir, "leaf.txt"), b"long path leaf\n")

    # Binary and text files of assorted sizes (compressible and not), one bigger than the cache line sizes.
    for i, n in enumerate([1, 4095, 4096, 4097, 65536, 300000]):
        write(os.path.join(root, "bin", "random%d.bin" % i), rng.randbytes(n))
    write(os.path.join(root, "bin", "zeros.bin"), bytes(1 << 20))
    # Several 1 MiB blocks, half compressible, for fio's engines at 4 KiB and 1 MiB block sizes.
    write(os.path.join(root, "bin", "big.bin"), (b"fanstore fio block " * 82783)[: 3 << 19] + rng.randbytes(3 << 19))
    write(os.path.join(root, "text", "lorem.txt"), (b"lorem ipsum dolor sit amet\n" * 20000))
    for i in range(30):
        write(os.path.join(root, "text", "many", "f%03d.txt" % i), ("file %d\n" % i).encode() * (i + 1))
    exe = os.path.join(root, "bin", "script.sh")
    write(exe, b"#!/bin/sh\necho script\n")
    os.chmod(exe, 0o755)
    # No "#!": execvp and the shells run it with /bin/sh (ENOEXEC). And a real ELF program, this machine's `echo`.
    plain = os.path.join(root, "bin", "plain.sh")
    write(plain, b"echo plain \"$@\"\n")
    os.chmod(plain, 0o755)
    elf = os.path.join(root, "bin", "echo.elf")
    with open(shutil.which("echo"), "rb") as f:
        write(elf, f.read())
    os.chmod(elf, 0o755)
    os.chmod(os.path.join(root, "text", "lorem.txt"), 0o600)
    # "#!" interpreters that are scripts, named relative to the working directory: 5 in a row run, 6 are ELOOP.
    for name, n in [("c", 5), ("d", 6)]:
        for i in range(1, n + 1):
            path = os.path.join(root, "bin", "chain", "%s%d" % (name, i))
            write(path, b"#!/bin/sh\necho chain of %d \"$@\"\n" % n if i == n else b"#!./%s%d\n" % (name.encode(), i + 1))
            os.chmod(path, 0o755)

    # Scientific formats.
    sci = os.path.join(root, "sci")
    os.makedirs(sci, exist_ok=True)
    np.save(os.path.join(sci, "array.npy"), nrng.standard_normal((64, 33)).astype(np.float32))
    np.savez_compressed(os.path.join(sci, "bundle.npz"), a=np.arange(1000), b=nrng.integers(0, 255, (16, 16, 3), dtype=np.uint8))
    nrng.standard_normal(5000).astype(np.float64).tofile(os.path.join(sci, "raw.f64"))
    with h5py.File(os.path.join(sci, "volume.h5"), "w") as f:
        f.create_dataset("x", data=nrng.standard_normal((8, 16, 16, 16)).astype(np.float32), chunks=(1, 16, 16, 16))
        f.create_dataset("y", data=np.arange(4, dtype=np.int64))
        f.attrs["note"] = "fanstore test"
    Image.fromarray(nrng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(os.path.join(sci, "picture.png"))
    Image.fromarray(nrng.integers(0, 255, (40, 50), dtype=np.uint8)).save(os.path.join(sci, "gray.jpg"), quality=90)

    # A software environment: symlinks of every kind (relative, to a directory, chained, dangling, absolute out of the
    # tree, a loop), a hard link, odd modes. Pack keeps them as they are; both front ends resolve them as the kernel.
    env = os.path.join(root, "env")
    write(os.path.join(env, "lib", "libfoo.so.1.2"), b"\x7fELF not really\n" * 100)
    os.symlink("libfoo.so.1.2", os.path.join(env, "lib", "libfoo.so.1"))
    os.symlink("libfoo.so.1", os.path.join(env, "lib", "libfoo.so"))
    os.symlink("lib", os.path.join(env, "lib64"))
    write(os.path.join(env, "bin", "python3"), b"#!/bin/sh\necho python \"$@\"\n")
    os.chmod(os.path.join(env, "bin", "python3"), 0o755)
    os.symlink("python3", os.path.join(env, "bin", "python"))
    os.link(os.path.join(env, "bin", "python3"), os.path.join(env, "bin", "python3-hard"))
    os.symlink("nowhere", os.path.join(env, "dangling"))
    os.symlink("../text", os.path.join(env, "up"))
    os.symlink("/etc/hostname", os.path.join(env, "abs_out"))
    os.symlink("/etc/shadow", os.path.join(env, "shadow"))
    os.symlink("loop2", os.path.join(env, "loop1"))
    os.symlink("loop1", os.path.join(env, "loop2"))
    os.makedirs(os.path.join(env, "x"), exist_ok=True)
    os.symlink("x/" + "a" * 4090, os.path.join(env, "too_long"))  # ENAMETOOLONG once followed (x exists)
    write(os.path.join(env, "setuid"), b"s\n")
    os.chmod(os.path.join(env, "setuid"), 0o4755)
    os.makedirs(os.path.join(env, "sticky"), exist_ok=True)
    os.chmod(os.path.join(env, "sticky"), 0o1777)
    with open(os.path.join(env, "sparse.img"), "wb") as f:  # holes: chunks of zeros, stored as nothing, no blocks
        f.truncate(3 << 20)
        f.seek(1 << 20)
        f.write(rng.randbytes(1 << 20))  # a whole chunk of data between two holes: the same blocks as the source

    # An ImageFolder tree: 3 classes of small JPEGs.
    for c in ["bird", "cat", "dog"]:
        d = os.path.join(root, "imagefolder", c)
        os.makedirs(d, exist_ok=True)
        for i in range(12):
            img = nrng.integers(0, 255, (24 + i, 32, 3), dtype=np.uint8)
            Image.fromarray(img).save(os.path.join(d, "%s_%02d.jpg" % (c, i)), quality=85)


if __name__ == "__main__":
    main()
