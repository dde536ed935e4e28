# The option tables of docs/cli.md and docs/daemon.md are generated from the subcommands' CLI11 definitions (the
# same ones `--help` prints): each block between "<!-- options: fanstore SUB -->" and "<!-- end options -->" must
# equal what fanstore_option_tables prints for SUB. Usage: check_cli_tables.py ROOT TABLES_BINARY [--write]
import re
import subprocess
import sys

root, tool = sys.argv[1], sys.argv[2]
write = "--write" in sys.argv[3:]
DOCS = ["docs/cli.md", "docs/daemon.md"]  # every doc with an options block
block = re.compile(r"(<!-- options: fanstore (\w+) -->\n)(.*?)(<!-- end options -->)", re.S)
texts = {doc: open(root + "/" + doc).read() for doc in DOCS}
subs = sorted({m.group(2) for text in texts.values() for m in block.finditer(text)})
if not subs:
    sys.exit("check_cli_tables: no <!-- options: fanstore SUB --> blocks in " + ", ".join(DOCS))
tables = {}
for sub in subs:
    r = subprocess.run([tool, sub], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_cli_tables: {tool} {sub} failed: {r.stderr.strip()}")
    tables[sub] = r.stdout
    if r.stdout.count("\n") <= 2:
        # serve without MPI, mount without FUSE: this build cannot say what the full one offers
        print(f"check_cli_tables: SKIP: this build has no options for `fanstore {sub}` (built without its library)")
        sys.exit(77)
stale = [(doc, m.group(2)) for doc, text in texts.items() for m in block.finditer(text)
         if m.group(3) != tables[m.group(2)]]
if write:
    for doc, text in texts.items():
        open(root + "/" + doc, "w").write(block.sub(lambda m: m.group(1) + tables[m.group(2)] + m.group(4), text))
    print(f"check_cli_tables: rewrote {len(stale)} stale table(s) in {', '.join(DOCS)}")
    sys.exit(0)
for doc, sub in stale:
    print(f"FAIL {doc}: the options table of `fanstore {sub}` differs from the CLI's definitions")
if stale:
    print(f"run: {sys.executable} {sys.argv[0]} {root} {tool} --write")
    sys.exit(1)
print(f"check_cli_tables: the option tables of {', '.join(DOCS)} match the CLI ({', '.join(subs)})")
