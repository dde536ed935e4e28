#!/usr/bin/python3
"""Data-loader epochs with torchvision ImageFolder + DataLoader; prints `label,mode,files,seconds,files_per_s`
(with --epochs N: the seconds and files/s of every epoch in turn, `label,mode,files,s1,rate1,s2,rate2,...`).

mode=bytes: each sample is the file read whole (open/read/close in the forked workers); the sample handed back
is its length, so what is timed is the I/O path, not pickling 110 KB through the worker queue.
mode=decode: PIL opens and decodes the JPEG and ToTensor converts it (the usual ImageNet pipeline minus resizing).
"""
import argparse
import time

import torch
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets, transforms
from PIL import Image


def read_len(path):
    with open(path, "rb") as f:
        return len(f.read())


def decode(path):
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="ImageFolder root (class sub-directories)")
    p.add_argument("--mode", choices=["bytes", "decode"], default="bytes")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--label", default="run")
    p.add_argument("--epochs", type=int, default=1,
                   help="epochs in one process (the first pays cold caches; later ones show the steady state)")
    p.add_argument("--hint", action="store_true",
                   help="send each epoch's order to the FanStore daemon (tools/python/fanstore_prefetch.py)")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.mode == "bytes":
        ds = datasets.ImageFolder(a.root, loader=read_len)
    else:
        ds = datasets.ImageFolder(a.root, loader=decode, transform=transforms.ToTensor())
    if a.hint:
        from fanstore_prefetch import HintingSampler, paths_of
        sampler = HintingSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(0)), paths_of(ds))
        loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers)
    else:
        loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                            generator=torch.Generator().manual_seed(0))
    # The directory scan above is not timed: it is done once per job; each epoch (incl. worker start-up) is.
    fields = [a.label, a.mode, str(len(ds))]
    for _ in range(a.epochs):
        start = time.monotonic()
        files = 0
        for samples, _ in loader:
            files += len(samples)
        seconds = time.monotonic() - start
        if files != len(ds):
            raise SystemExit(f"loader_epoch: read {files} of {len(ds)} files")
        fields += [f"{seconds:.4f}", f"{files / seconds:.1f}"]
    print(",".join(fields))

if __name__ == "__main__":
    main()
