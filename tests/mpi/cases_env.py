"""A software environment through the daemons: numpy, torch and a C library pair packed into an image spread over 4 ranks,
imported and loaded (the loader's audit module) through `fanstore run --daemon` on one rank, where most files are
remote: the same output as from the source tree."""
import os
import re
import shutil
import subprocess

from mpi_harness import SKIP, Job, check, counters, log

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "integration", "env_probe.py")


def build_env(ctx):
    """SRC/py/numpy (a copy of the system's), SRC/py/env_probe.py and SRC/env (libfoo, libbar, foo-rpath)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    src = ctx.src
    os.makedirs(os.path.join(src, "py"))
    dist = subprocess.run([ctx.args.python, "-c", "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shutil.copytree(os.path.join(dist, "numpy"), os.path.join(src, "py", "numpy"), symlinks=True)
    if subprocess.run([ctx.args.python, "-c", "import torch"], capture_output=True).returncode == 0:
        shutil.copytree(os.path.join(dist, "torch"), os.path.join(src, "py", "torch"), symlinks=True)
        # Debian's torch/lib links climb out of the package: point them at the system's files (out of the image).
        lib = os.path.join(src, "py", "torch", "lib")
        for name in os.listdir(lib):
            p = os.path.join(lib, name)
            if os.path.islink(p):
                os.unlink(p)
                os.symlink(os.path.realpath(os.path.join(dist, "torch", "lib", name)), p)
    shutil.copy(PROBE, os.path.join(src, "py", "env_probe.py"))
    env, tmp = os.path.join(src, "env"), os.path.join(ctx.work, "c")
    for d in ("lib", "plugins", "bin"):
        os.makedirs(os.path.join(env, d))
    os.makedirs(tmp)
    for name, text in (("foo.c", "int foo(void) { return 42; }\n"),
                       ("bar.c", "int foo(void);\nint bar(void) { return foo() + 1; }\n"),
                       ("main.c", '#include <stdio.h>\nint foo(void);\nint main(void) { printf("foo() = %d\\n", foo()); return 0; }\n')):
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    lib = os.path.join(env, "lib")
    cmds = [[cc, "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o", os.path.join(lib, "libfoo.so.1.2"), os.path.join(tmp, "foo.c")],
            [cc, "-shared", "-fPIC", "-o", os.path.join(env, "plugins", "libbar.so"), os.path.join(tmp, "bar.c"),
             "-L" + lib, "-lfoo", "-Wl,-rpath,$ORIGIN/../lib64", "-Wl,--enable-new-dtags"],
            [cc, "-o", os.path.join(env, "bin", "foo-rpath"), os.path.join(tmp, "main.c"), "-L" + lib, "-lfoo",
             "-Wl,-rpath,$ORIGIN/../lib"]]
    os.symlink("libfoo.so.1.2", os.path.join(lib, "libfoo.so.1"))
    os.symlink("libfoo.so.1", os.path.join(lib, "libfoo.so"))
    os.symlink("lib", os.path.join(env, "lib64"))
    for c in cmds:
        subprocess.run(c, check=True, capture_output=True)
    with open(os.path.join(env, "sparse.img"), "wb") as f:  # zero chunks: nothing stored, nothing fetched
        f.truncate(3 << 20)
        f.seek(1500000)
        f.write(b"data between two holes")
    return True


def case_environment(ctx):
    if not os.path.exists(ctx.args.preload):
        log(f"SKIPPED: {ctx.args.preload} is not built")
        return SKIP
    if not build_env(ctx):
        log("SKIPPED: no C compiler")
        return SKIP
    r = subprocess.run([ctx.args.fanstore, "pack", ctx.src, "-o", ctx.img, "--parts", "8"], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, f"pack failed: {r.stderr}")
    probe = [ctx.args.python, "py/env_probe.py", "ROOT"]
    want = subprocess.run([a.replace("py/", ctx.src + "/py/").replace("ROOT", ctx.src) for a in probe],
                          capture_output=True, text=True, timeout=300, env=dict(ctx.env, PYTHONPATH=ctx.src + "/py"))
    check(want.returncode == 0, f"the probe fails on the source tree: {want.stderr[-2000:]}")
    job = Job(ctx, 4)
    job.wait_ready()
    got = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--"] +
                         [a.replace("py/", "/fanstore/py/").replace("ROOT", "/fanstore") for a in probe],
                         capture_output=True, text=True, timeout=300, env=dict(ctx.env, PYTHONPATH="/fanstore/py"))
    log(f"probe through rank 0's daemon: rc {got.returncode}\n{got.stdout}")
    check(got.returncode == 0, f"the probe fails through the daemon:\n{got.stderr[-3000:]}")
    check(got.stdout.replace("/fanstore", "@") == want.stdout.replace(ctx.src, "@"),
          f"through the daemon:\n{got.stdout}\nfrom the source tree:\n{want.stdout}")
    md5 = subprocess.run([ctx.args.fanstore, "run", "--daemon", ctx.sock(0), "--mount", "/fanstore", "--", "md5sum",
                          "/fanstore/env/sparse.img"], capture_output=True, text=True, timeout=60, env=ctx.env)
    want_md5 = subprocess.run(["md5sum", os.path.join(ctx.src, "env", "sparse.img")], capture_output=True, text=True)
    check(md5.returncode == 0 and md5.stdout.split()[0] == want_md5.stdout.split()[0],
          f"a sparse file through the daemon: {md5.stdout} {md5.stderr} (want {want_md5.stdout})")
    job.stop()
    c = counters(job.output(), 0)
    log(f"rank 0 daemon: {c}")
    check(c and c["client requests"] > 0 and c["errors"] == 0, "the environment must have come through rank 0's daemon")
