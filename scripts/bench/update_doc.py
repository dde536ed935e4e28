#!/usr/bin/python3
"""Replaces the block between the bench markers in docs/performance.md with a results.md (usage: RESULTS DOC)."""
import sys

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def main():
    results, doc = sys.argv[1], sys.argv[2]
    with open(results) as f:
        # The doc's own "## Latest results" is the parent: push every heading of results.md one level down.
        table = "\n".join("#" + line if line.startswith("#") else line for line in f.read().strip().splitlines())
    with open(doc) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"update_doc: {doc} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(doc, "w") as f:
        f.write(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    print(f"update_doc: {doc} updated")


if __name__ == "__main__":
    main()
