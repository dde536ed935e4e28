#!/usr/bin/python3
"""Generates the benchmark tree (small files, a 10,000-entry directory, a big file, an ImageNet-like folder, DLIO samples).

Layout under --out (lists of relative paths go to --lists, off every mount under test):
  micro/d10k/      10,000 x 4 KiB, compressible ~2:1 (stat/open/read/readdir)
  micro/f128k/     128 KiB files, compressible ~2:1
  micro/f4m/       4 MiB files (remote-read sizes)
  micro/big.bin    one large file, compressible ~2:1 (sequential read)
  imagenet/train/<class>/*.JPEG  ~110 KB files: a real small JPEG padded with random bytes, so PIL decodes them
                   and their size and incompressibility match ImageNet (decoding a 224px image is not the point)
  dlio/{unet3d,resnet50,cosmoflow}/  random samples of the MLPerf Storage sizes (unet3d scaled down, see --unet3d-mib)
"""
import argparse
import io
import os

import numpy as np
from PIL import Image


def compressible(rng, size):
    # Half random, half zero in 256-byte stripes: zstd gets ~2:1, like text/CSV/float data; fast to generate.
    buf = np.frombuffer(rng.bytes(size), dtype=np.uint8).copy()
    stripes = buf[: size - size % 256].reshape(-1, 256)
    stripes[:, 128:] = 0
    return buf.tobytes()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def write_list(path, names):
    with open(path, "w") as f:
        f.write("\n".join(names) + "\n")


def make_micro(rng, out, lists, n128k, n4m, big_mib):
    d10k = os.path.join(out, "micro", "d10k")
    os.makedirs(d10k)
    pool = compressible(rng, 4096 * 10000)
    names = [f"f{i:05d}" for i in range(10000)]
    for i, name in enumerate(names):
        write(os.path.join(d10k, name), pool[i * 4096:(i + 1) * 4096])
    write_list(os.path.join(lists, "d10k.txt"), names)

    for sub, count, size in (("f128k", n128k, 128 << 10), ("f4m", n4m, 4 << 20)):
        d = os.path.join(out, "micro", sub)
        os.makedirs(d)
        names = [f"g{i:05d}" for i in range(count)]
        for name in names:
            write(os.path.join(d, name), compressible(rng, size))
        write_list(os.path.join(lists, f"{sub}.txt"), names)

    with open(os.path.join(out, "micro", "big.bin"), "wb") as f:
        for _ in range(big_mib // 64):
            f.write(compressible(rng, 64 << 20))
        if big_mib % 64:
            f.write(compressible(rng, (big_mib % 64) << 20))


def make_imagenet(rng, out, files, classes):
    # A handful of distinct real JPEGs, each padded (after the EOI marker, which decoders ignore) to 100-120 KB.
    bases = []
    for _ in range(16):
        img = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
        b = io.BytesIO()
        Image.fromarray(img).save(b, "JPEG", quality=90)
        bases.append(b.getvalue())
    per_class = files // classes
    for c in range(classes):
        d = os.path.join(out, "imagenet", "train", f"n{c:08d}")
        os.makedirs(d)
        for i in range(per_class):
            base = bases[(c * per_class + i) % len(bases)]
            size = int(rng.integers(100_000, 120_000))
            write(os.path.join(d, f"img_{i:05d}.JPEG"), base + rng.bytes(size - len(base)))


def make_dlio(rng, out, lists, workload, count, size, ext):
    d = os.path.join(out, "dlio", workload)
    os.makedirs(d)
    names = [f"sample_{i:05d}.{ext}" for i in range(count)]
    for name in names:
        write(os.path.join(d, name), rng.bytes(size))
    write_list(os.path.join(lists, f"{workload}.txt"), names)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--lists", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--unet3d-mib", type=int, default=32, help="unet3d sample size (MLPerf: ~140 MiB)")
    a = p.parse_args()
    q = a.quick
    rng = np.random.default_rng(2024)
    os.makedirs(a.lists, exist_ok=True)
    make_micro(rng, a.out, a.lists, n128k=500 if q else 2000, n4m=32 if q else 64, big_mib=64 if q else 1024)
    make_imagenet(rng, a.out, files=2000 if q else 20000, classes=10 if q else 100)
    make_dlio(rng, a.out, a.lists, "unet3d", 14 if q else 28, a.unet3d_mib << 20, "npz")
    make_dlio(rng, a.out, a.lists, "resnet50", 800 if q else 4000, 114660, "tfrecord")
    make_dlio(rng, a.out, a.lists, "cosmoflow", 40 if q else 200, 2828486, "tfrecord")


if __name__ == "__main__":
    main()
