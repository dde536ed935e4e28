"""Makes a small ImageNet-style tree (class = directory of JPEGs) plus a numpy array, for the demo."""
import os
import sys

import numpy as np
from PIL import Image

out, classes, per_class = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1234)
for split, n in (("train", per_class), ("val", max(1, per_class // 5))):
    for c in range(classes):
        d = os.path.join(out, split, f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            # A class-dependent stripe frequency on top of noise: learnable, survives crops and flips.
            y = np.arange(96).reshape(-1, 1)
            base = 127 + 100 * np.sin(y * (c + 1) * 0.15)
            img = np.clip(base + rng.normal(0, 30, (96, 96, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(img).save(os.path.join(d, f"img_{i:04d}.jpg"), quality=90)
np.save(os.path.join(out, "labels.npy"), np.arange(classes * per_class, dtype=np.int64) % classes)
