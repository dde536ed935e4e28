#!/usr/bin/python3
"""The tree's root as its parent directory shows it (listdir, scandir, glob), and paths relative to a
directory fd of the parent: prints the same for a real tree and for the FanStore mount."""
import glob
import os
import sys


def main():
    root = sys.argv[1]
    parent, base = os.path.split(root)
    print("listdir", base in os.listdir(parent))
    print("scandir", [e.is_dir() for e in os.scandir(parent) if e.name == base])
    matches = glob.glob(os.path.join(parent, "*", "text", "many", "f00*.txt"))
    print("glob", sorted(p.replace(root, "@", 1) for p in matches if p.startswith(root + "/")))
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    print("dir_fd stat", os.stat(base + "/text/lorem.txt", dir_fd=fd).st_size)
    f = os.open(base + "/bin/random2.bin", os.O_RDONLY, dir_fd=fd)
    print("dir_fd open", len(os.read(f, 10000)))
    print("dir_fd listdir", sorted(os.listdir(os.open(base + "/sci", os.O_RDONLY, dir_fd=fd))))


if __name__ == "__main__":
    main()
