"""What a job does with a Python environment: run from an image by env_from_image.sh; prints what must match."""
import ctypes
import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np


def work(x):  # runs in pool workers: spawn and forkserver children import this module (and numpy) afresh
    return float(np.sqrt(x)) + len(np.__file__) * 0


class Squares:  # a map-style dataset: DataLoader workers (fork) index it
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return np.float32(i) ** 2


def main(root):
    def rel(p):
        return p.replace(root, "@")

    print("numpy", rel(np.__file__), np.random.default_rng(1).standard_normal(3).round(6).tolist(),
          np.linalg.inv(np.eye(2) * 4).tolist())
    for method in ("fork", "spawn", "forkserver"):
        with mp.get_context(method).Pool(2) as pool:
            print(method, pool.map(work, [1, 4, 9]))
    torch = None
    if "--no-torch" not in sys.argv:
        try:
            import torch
        except ImportError:
            pass
    if torch is not None:
        torch.manual_seed(0)
        print("torch", rel(torch.__file__), round(torch.randn(4).sum().item(), 5),
              torch.nn.functional.relu(torch.tensor([-1.0, 2.0])).tolist())
        from torch.utils.data import DataLoader
        print("dataloader", [b.tolist() for b in DataLoader(Squares(), batch_size=4, num_workers=2)])
    bar = ctypes.CDLL(root + "/env/plugins/libbar.so")  # DT_NEEDED libfoo.so.1 through RUNPATH $ORIGIN/../lib64
    print("libbar", bar.bar())
    for bad in ("libloop.so", "libnone.so"):  # links that loop (ELOOP), no such file (ENOENT): the same error
        try:
            ctypes.CDLL(root + "/env/lib/" + bad)
        except OSError as e:
            print("dlopen", bad, str(e).rsplit(": ", 1)[-1])  # the loader names the path it opened: a copy's
    prog = root + "/env/bin/foo-rpath"  # RUNPATH $ORIGIN/../lib: exec'd by fork+exec, then by posix_spawn
    print(subprocess.run([prog], capture_output=True, text=True).stdout.strip())
    r, w = os.pipe()
    pid = os.posix_spawn(prog, [prog], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.close(w)
    print("posix_spawn", os.read(r, 100).decode().strip(), os.waitpid(pid, 0)[1])
    os.close(r)
    print("realpath", rel(os.path.realpath(root + "/env/lib64/libfoo.so")), os.readlink(root + "/env/lib/libfoo.so"))


if __name__ == "__main__":
    main(sys.argv[1])  # ROOT [--no-torch]
