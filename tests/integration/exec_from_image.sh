#!/bin/bash
# Programs stored in the tree, started through every exec path a launcher uses: execve (bash), execv
# (Python's subprocess), execvp with and without a PATH search (env, find -exec, xargs, nice, timeout),
# posix_spawn[p] (Python's os.posix_spawn*), an ELF program, a "#!" script and a script without "#!".
# Prints the same for a real tree and for the FanStore mount.  Usage: exec_from_image.sh ROOT PYTHON
root=$1 py=$2
s=$root/bin/script.sh e=$root/bin/echo.elf p=$root/bin/plain.sh
"$s"; "$e" elf; "$p" a
env "$s"; env "$e" env-elf; env "$p" env
PATH="$root/bin:$PATH" env script.sh; PATH="$root/bin:$PATH" env echo.elf path-elf; PATH="$root/bin:$PATH" env plain.sh path
find "$root/bin" -name script.sh -exec {} \;
echo xargs | xargs "$e"
nice "$s"; timeout 60 "$e" timeout
(cd "$root/bin/chain" && ./c1 bash; ./d1 bash; echo "status $?") 2>&1
"$py" - "$root" <<'PY'
import os, subprocess, sys
root = sys.argv[1]
for prog in ["script.sh", "echo.elf"]:
    path = os.path.join(root, "bin", prog)
    print("subprocess", subprocess.run([path, "sub"], capture_output=True, text=True).stdout.strip())
    print("subprocess close_fds=False", subprocess.run([path, "nocl"], close_fds=False, capture_output=True, text=True).stdout.strip())
    r, w = os.pipe()
    pid = os.posix_spawn(path, [path, "spawn"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.close(w)
    print("posix_spawn", os.read(r, 100).decode().strip(), os.waitpid(pid, 0)[1])
    os.close(r)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = os.path.join(root, "bin") + ":" + old_path  # posix_spawnp searches the caller's PATH
    r, w = os.pipe()
    pid = os.posix_spawnp(prog, [prog, "spawnp"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.environ["PATH"] = old_path
    os.close(w)
    print("posix_spawnp", os.read(r, 100).decode().strip(), os.waitpid(pid, 0)[1])
    os.close(r)
for name, fn in [("execv", lambda p: os.execv(p, [p, "execv"])), ("execvp", lambda p: os.execvp(p, [p, "execvp"])),
                 ("execvp PATH", lambda p: os.execvpe(os.path.basename(p), [p, "execvpe"],
                                                       dict(os.environ, PATH=os.path.dirname(p))))]:
    for prog in ["script.sh", "echo.elf", "plain.sh"]:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                fn(os.path.join(root, "bin", prog))
            except OSError as e:
                print(name, prog, "failed:", e.strerror, flush=True)
            os._exit(1)
        print(name, prog, "status", os.waitpid(pid, 0)[1] >> 8, flush=True)
# "#!" interpreters that are scripts themselves (bin/chain/c1..c5 run; d1..d6 are one too many: ELOOP).
os.chdir(os.path.join(root, "bin", "chain"))
for prog in ["./c1", "./d1"]:
    try:
        print("chain", subprocess.run([prog, "sub"], capture_output=True, text=True).stdout.strip())
    except OSError as e:
        print("chain", prog, "failed:", e.strerror)
    try:
        pid = os.posix_spawn(prog, [prog, "spawn"], os.environ)
        print("chain posix_spawn", prog, "status", os.waitpid(pid, 0)[1])
    except OSError as e:
        print("chain posix_spawn", prog, "failed:", e.strerror)
for prog in ["missing", "."]:
    try:
        os.execv(os.path.join(root, "bin", prog), ["x"])
    except OSError as e:
        print("execv", prog, e.strerror)
PY
