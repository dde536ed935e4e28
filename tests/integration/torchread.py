#!/usr/bin/python3
"""torchvision ImageFolder + DataLoader(num_workers=2) over ROOT/imagefolder: prints one hash of every sample."""
import hashlib
import sys

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    ds = datasets.ImageFolder(sys.argv[1], transform=transforms.ToTensor())
    # DataLoader workers are forked: they inherit the interposer and must see the same fds and files.
    loader = DataLoader(ds, batch_size=5, shuffle=False, num_workers=2, collate_fn=lambda b: b)
    h = hashlib.sha256()
    n = 0
    for batch in loader:
        for x, y in batch:
            h.update(x.numpy().tobytes())
            h.update(str(y).encode())
            n += 1
    print("classes=%s samples=%d sha256=%s" % (ds.classes, n, h.hexdigest()))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
