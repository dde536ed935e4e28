#!/usr/bin/python3
# meta.env_table: README.md's environment tables match fanstore/include/fanstore/env.hpp and env_tooling.hpp, every variable that a file
# in the tree reads is listed there, every listed variable is still read somewhere, and a shell or Python default
# (${NAME:-x}, os.environ.get("NAME") or "x") agrees with the table's default where that is one `literal`.
# Usage: check_env.py --root SRC --table ENV_TABLE_BINARY [--build BUILD_DIR] [--write]   (--write regenerates README.md's block)
import argparse
import os
import re
import subprocess
import sys

ENV_HPP = "fanstore/include/fanstore/env.hpp"  # the run-time variables (installed)
TOOLING_HPP = "fanstore/include/fanstore/env_tooling.hpp"  # the scripts' and the tests' (not installed)
BEGIN = "<!-- BEGIN env-table"
END = "<!-- END env-table -->"

# Defined by the OS, the shell, the C library, MPI or Slurm, not by FanStore: reading them needs no entry (a FanStore
# program that reads one on purpose, like SLURMD_NODENAME, still lists it).
FOREIGN = {"TMPDIR", "HOME", "PATH", "USER", "BASHPID", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "PYTHONPATH"}
FOREIGN_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_")

C_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".inc")
C_READ = re.compile(r'\b(?:secure_)?getenv\s*\(\s*"([A-Za-z_][A-Za-z0-9_]*)"')
C_IDENT = re.compile(r'\benv::(k[A-Za-z0-9_]+)\b')
PY_READ = re.compile(r'\bos\.(?:environ\.get\s*\(|environ\s*\[|getenv\s*\()\s*[\'"]([A-Za-z_][A-Za-z0-9_]*)[\'"]')
# Shell: an expansion with a default or a "must be set" (${NAME:-x}, ${NAME-x}, ${NAME:?}) reads the environment;
# so does any reference to a FANSTORE_* name.
SH_READ = re.compile(r'\$\{([A-Z][A-Z0-9_]*)(?::?[-?=+])|\$\{?(FANSTORE_[A-Z0-9_]+)')
SH_DEFAULT = re.compile(r'\$\{([A-Z][A-Z0-9_]*):?-([^}$`"\' ]*)\}')
PY_DEFAULT = re.compile(r'\bos\.environ\.get\(\s*[\'"](\w+)[\'"]\s*(?:,\s*|\)\s*or\s*)[\'"]([^\'"]*)[\'"]')
CMAKE_READ = re.compile(r'\$ENV\{([A-Za-z_][A-Za-z0-9_]*)\}')


def tree_files(root):
    """Tracked and untracked-but-not-ignored files (a build directory inside the tree is never scanned)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout.decode()
        return sorted(f for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, subdirs, names in os.walk(root):
            subdirs[:] = [s for s in subdirs if s != ".git" and
                          not os.path.exists(os.path.join(d, s, "CMakeCache.txt"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(files)


def kind_of(path, text):
    base = os.path.basename(path)
    if path.endswith(C_SUFFIXES):
        return "c"
    if path.endswith(".py"):
        return "py"
    if base == "CMakeLists.txt" or path.endswith(".cmake"):
        return "cmake"
    if path.endswith((".sh", ".bash", ".sbatch")) or re.match(r"#!.*\b(ba)?sh\b", text):
        return "sh"
    if re.match(r"#!.*python", text):
        return "py"
    return None


def reads(root, ids):
    """(file, line, NAME, default or None) for every environment read found in the tree."""
    found, defaults = [], []
    for rel in tree_files(root):
        if rel in (ENV_HPP, TOOLING_HPP):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        kind = kind_of(rel, text)
        if kind is None:
            continue
        for n, line in enumerate(text.split("\n"), 1):
            names = []
            if kind == "c":
                names += C_READ.findall(line)
                names += [ids[i] for i in C_IDENT.findall(line) if i in ids]  # other env:: names are constants
            elif kind == "py":
                if line.lstrip().startswith("#"):
                    continue
                names += PY_READ.findall(line)
                defaults += [(rel, n, name, value) for name, value in PY_DEFAULT.findall(line)]
            elif kind == "sh":
                if line.lstrip().startswith("#"):
                    continue
                names += [a or b for a, b in SH_READ.findall(line)]
                defaults += [(rel, n, name, value) for name, value in SH_DEFAULT.findall(line)]
            elif kind == "cmake":
                names += CMAKE_READ.findall(line)
            found += [(rel, n, name) for name in names]
    return found, defaults


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--table", required=True, help="the env_table binary built from env.hpp")
    ap.add_argument("--build", help="the build directory, to say how to rebuild the table binary")
    ap.add_argument("--write", action="store_true", help="regenerate README.md's block instead of checking it")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    markdown = subprocess.run([a.table, "--markdown"], capture_output=True, text=True, check=True).stdout
    ids, fallbacks = {}, {}
    for line in subprocess.run([a.table, "--names"], capture_output=True, text=True, check=True).stdout.split("\n"):
        if line:
            name, ident, fallback = line.split("\t")
            ids[ident] = name
            literal = re.fullmatch(r"`([^`]*)`", fallback)
            if literal:
                fallbacks[name] = literal.group(1)
    listed = set(ids.values())
    rebuild = f"cmake --build {os.path.abspath(a.build)} --target env_table && " if a.build else ""
    regenerate = rebuild + " ".join([os.environ.get("FANSTORE_PYTHON") or "/usr/bin/python3",
                           os.path.abspath(sys.argv[0]), "--root", root, "--table", os.path.abspath(a.table), "--write"])
    problems = []

    # 1. README.md's block is exactly what env.hpp generates.
    readme_path = os.path.join(root, "README.md")
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    start, stop = readme.find(BEGIN), readme.find(END)
    if start < 0 or stop < start:
        problems.append(f"README.md: no generated environment table (a '{BEGIN} ...' ... '{END}' block); "
                        f"put the two marker lines under '## Environment variables' and run: {regenerate}")
    else:
        current = readme[start:stop + len(END)] + "\n"
        if current != markdown:
            if a.write:
                with open(readme_path, "w", encoding="utf-8") as f:
                    f.write(readme[:start] + markdown + readme[stop + len(END) + 1:])
                print(f"check_env: regenerated the table in {readme_path}")
            else:
                import difflib
                sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), markdown.splitlines(True),
                                                           "README.md (now)", f"generated from {ENV_HPP}"))
                problems.append(f"README.md: the environment table differs from {ENV_HPP} (diff above); README.md's "
                                f"table is generated, so change {ENV_HPP} and run: {regenerate}")

    # 2. Everything the tree reads is listed; everything listed is read.
    seen = set()
    found, defaults = reads(root, ids)
    for rel, line, name, value in defaults:
        if name in fallbacks and value != fallbacks[name]:
            problems.append(f"{rel}:{line}: defaults {name} to '{value}', but {ENV_HPP} says `{fallbacks[name]}`: "
                            f"use the same default (or change the table, then run: {regenerate})")
    for rel, line, name in found:
        seen.add(name)
        if name not in listed and name not in FOREIGN and not name.startswith(FOREIGN_PREFIXES):
            problems.append(f"{rel}:{line}: reads environment variable {name}, which neither {ENV_HPP} nor "
                            f"{TOOLING_HPP} lists: add one X(kIdentifier, \"{name}\", Scope::k..., \"read by\", "
                            f"\"meaning\", \"default\") line to FANSTORE_ENV_VARIABLES (read at run time) or "
                            f"FANSTORE_TOOLING_ENV_VARIABLES (scripts, tests), then run: {regenerate}")
    for name in sorted(listed - seen):
        problems.append(f"{ENV_HPP} or {TOOLING_HPP}: lists {name}, but no file in the tree reads it any more: remove its line "
                        f"(or read it through env::), then run: {regenerate}")

    for p in problems:
        print("FAIL " + p)
    if problems:
        return 1
    print(f"check_env: {len(listed)} variables listed in {ENV_HPP} and {TOOLING_HPP}; README.md matches; "
          f"every variable read in the tree is listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
