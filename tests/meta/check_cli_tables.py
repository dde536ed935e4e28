# The option tables of docs/cli.md are generated from the subcommands' CLI11 definitions (the same ones `--help`
# prints): each block between "<!-- options: fanstore SUB -->" and "<!-- end options -->" must equal what
# fanstore_option_tables prints for SUB. Usage: check_cli_tables.py ROOT TABLES_BINARY [--write]
import re
import subprocess
import sys

root, tool = sys.argv[1], sys.argv[2]
write = "--write" in sys.argv[3:]
path = root + "/docs/cli.md"
text = open(path).read()
block = re.compile(r"(<!-- options: fanstore (\w+) -->\n)(.*?)(<!-- end options -->)", re.S)
subs = [m.group(2) for m in block.finditer(text)]
if not subs:
    sys.exit("check_cli_tables: docs/cli.md has no <!-- options: fanstore SUB --> blocks")
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
stale = [m.group(2) for m in block.finditer(text) if m.group(3) != tables[m.group(2)]]
if write:
    new = block.sub(lambda m: m.group(1) + tables[m.group(2)] + m.group(4), text)
    open(path, "w").write(new)
    print(f"check_cli_tables: rewrote {len(stale)} of {len(subs)} tables in docs/cli.md")
    sys.exit(0)
for sub in stale:
    print(f"FAIL docs/cli.md: the options table of `fanstore {sub}` differs from the CLI's definitions")
if stale:
    print(f"run: {sys.executable} {sys.argv[0]} {root} {tool} --write")
    sys.exit(1)
print(f"check_cli_tables: {len(subs)} option tables in docs/cli.md match the CLI ({', '.join(subs)})")
