#!/usr/bin/python3
"""Every way Python creates a file, tried in a read-only tree: prints the exception class and errno of each
(the same on a read-only bind mount and on the FanStore mount), and that nothing was created."""
import os
import socket
import sys
import tempfile


def attempt(name, f):
    try:
        f()
        print(name, "created")
    except OSError as e:
        print(name, e.__class__.__name__, e.errno)


def main():
    root, outside = sys.argv[1], sys.argv[2]
    attempt("mkstemp", lambda: tempfile.mkstemp(dir=root))
    attempt("mkdtemp", lambda: tempfile.mkdtemp(dir=root + "/text"))
    attempt("TemporaryFile", lambda: tempfile.TemporaryFile(dir=root))
    attempt("NamedTemporaryFile", lambda: tempfile.NamedTemporaryFile(dir=root + "/nodir"))
    attempt("open x", lambda: open(root + "/new", "x"))
    attempt("open a", lambda: open(root + "/text/lorem.txt", "a"))
    fd = os.open(root + "/text/lorem.txt", os.O_RDONLY)
    attempt("/proc/self/fd w", lambda: open("/proc/self/fd/%d" % fd, "w"))
    print("/proc/self/fd r", len(open("/proc/self/fd/%d" % fd).read()))
    attempt("link", lambda: os.link(outside, root + "/hard"))
    attempt("symlink", lambda: os.symlink("x", root + "/sym"))
    attempt("mkfifo", lambda: os.mkfifo(root + "/fifo"))
    # A Unix socket's name is a file too; connecting looks one up. (Connecting to an existing regular file is
    # ECONNREFUSED on a read-only bind mount but EROFS on a read-only file system: ro.fsio checks that one.)
    for path in ["/sock", "/text/sock", "/nodir/sock", "/text/lorem.txt", "/text/lorem.txt/sock"]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            attempt("bind " + path, lambda: s.bind(root + path))
        if path == "/text/lorem.txt":
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            attempt("connect " + path, lambda: s.connect(root + path))
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            attempt("sendto " + path, lambda: s.sendto(b"x", root + path))


if __name__ == "__main__":
    main()
