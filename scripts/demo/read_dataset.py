"""Reads every sample of an ImageFolder tree with torchvision + DataLoader workers; prints rate and a digest."""
import hashlib
import sys
import time

import torch
import torchvision
from torchvision import transforms

root = sys.argv[1]
ds = torchvision.datasets.ImageFolder(root, transform=transforms.ToTensor())
loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, shuffle=False)
digest = hashlib.sha256()
t0 = time.perf_counter()
n = 0
for x, y in loader:
    digest.update(x.numpy().tobytes())
    digest.update(y.numpy().tobytes())
    n += len(y)
dt = time.perf_counter() - t0
print(f"read {n} samples in {len(ds.classes)} classes from {root}: {n / dt:.0f} samples/s, digest {digest.hexdigest()[:16]}")
