#!/usr/bin/python3
"""meta.refs: every repository path named in the tree (fanstore/protocol/include/fanstore/protocol/image_format.hpp, scripts/bench.sh, docs/reading.md)
exists, and every section named after a doc (docs/daemon.md, "Staging rules") is a heading of that doc, so that a
comment or a doc cannot point at something renamed or gone. Exit 0 when all hold, 1 with one line per dangling one.

Usage: check_refs.py ROOT
"""
import os
import re
import subprocess
import sys

TOPS = ("fanstore", "interpose", "trainer", "tools", "tests", "scripts", "docs", "cmake")
EXTS = ("cpp", "hpp", "h", "cu", "cuh", "c", "py", "sh", "md", "cmake", "txt", "gp", "sbatch", "json")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*?\.(?:%s))(?![\w/-]|\.\w)" % ("|".join(TOPS), "|".join(EXTS)))
# A doc and a section: docs/ then NAME.md, a comma, the section in double quotes (also across a line break and a
# comment marker)
SECTION = re.compile(r"(docs/[\w-]+\.md),?\s*(?:#|//|\*)?\s*\"([^\"\n]+)\"")


def resolves(root, rel, name):
    """A name resolves from the repository root, from the naming file's folder or the one above it (a
    CMakeLists.txt names its sources relative to itself), or as a public header under an include folder."""
    here = os.path.dirname(os.path.join(root, rel))
    bases = [root, here, os.path.dirname(here)]
    bases += [os.path.join(root, d) for d in ("fanstore/include", "trainer/include", "trainer/data/include",
                                               "fanstore/daemon/include", "trainer")]
    return any(os.path.exists(os.path.join(b, name)) for b in bases)


def headings(path):
    with open(path, encoding="utf-8") as f:
        return [line.lstrip("#").strip() for line in f if line.startswith("#")]


def main():
    root = sys.argv[1]
    git = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True)
    if git.returncode == 0:
        files = git.stdout.split()
    else:  # not a git checkout (a source tarball): every file but build trees
        files = [os.path.relpath(os.path.join(d, f), root) for d, subs, names in os.walk(root) for f in names
                 if not os.path.relpath(d, root).startswith(("build", ".git"))]
    bad = []
    for rel in files:
        if not rel.endswith(EXTS) and "CMakeLists" not in rel:
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in PATH.finditer(text):
            name = m.group(1).rstrip(".")
            line_start = text.rfind("\n", 0, m.start()) + 1
            if text.startswith("#include", line_start):
                continue  # the compiler checks those
            if "*" in name or "{" in name or (name.startswith("docs/") and not name.endswith(".md")):
                continue  # a pattern, or a path inside a test's image
            if not resolves(root, rel, name):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{rel}:{line}: names {name}, which does not exist")
        for m in SECTION.finditer(text):
            doc, section = m.group(1), m.group(2)
            full = os.path.join(root, doc)
            line = text.count("\n", 0, m.start()) + 1
            if not os.path.exists(full):
                continue  # reported above
            if not any(section.lower() in h.lower() for h in headings(full)):
                bad.append(f'{rel}:{line}: names section "{section}" of {doc}, which has no such heading')
    for b in sorted(set(bad)):
        print("FAIL " + b)
    print(f"check_refs: {len(set(bad))} dangling reference(s) in {len(files)} files")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
