#!/usr/bin/python3
"""Reads the files of LIST (paths under ROOT) one at a time with GAP_MS of idleness between reads, so that the
daemons' progress loops leave their hot window before each, and prints the ops and the mean microseconds per
read in fanstore-iobench's CSV layout (label,op,threads,ops,seconds,ns_per_op): what a request after a quiet
spell costs. Run it under `fanstore run --daemon`. Usage: paced_read.py ROOT LIST GAP_MS COUNT"""
import os
import sys
import time


def main():
    root, listing, gap, count = sys.argv[1], sys.argv[2], float(sys.argv[3]) / 1000, int(sys.argv[4])
    with open(listing) as f:
        paths = [os.path.join(root, line.strip()) for line in f if line.strip()]
    spent = 0.0
    for i in range(count):
        time.sleep(gap)
        t0 = time.perf_counter()
        fd = os.open(paths[i % len(paths)], os.O_RDONLY)
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)
        spent += time.perf_counter() - t0
    print(f"paced,read,1,{count},{spent:.4f},{spent / count * 1e9:.1f}")


if __name__ == "__main__":
    main()
