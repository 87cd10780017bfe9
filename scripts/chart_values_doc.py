#!/usr/bin/env python3
"""The values table of charts/gpuckpt/README.md from values.yaml, helm-docs style: every key with a `# -- `
comment above it (continued by the `#` lines that follow) becomes a row with its type and default.

    chart_values_doc.py VALUES_YAML README   prints README with the table between its values markers replaced
"""
import json
import re
import sys

import yaml

KEY = re.compile(r"^( *)([A-Za-z0-9_]+):")


def rows(path):
    values = yaml.safe_load(open(path))
    stack, comment, out = [], None, []
    for line in open(path):
        stripped = line.strip()
        if stripped.startswith("# -- "):
            comment = [stripped[5:]]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped.lstrip("#").strip())
            continue
        m = KEY.match(line)
        if not m:
            if stripped and not stripped.startswith("-"):
                comment = None
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if comment is not None:
            keys = [k for _, k in stack]
            value = values
            for k in keys:
                value = value[k]
            out.append((".".join(keys), value, " ".join(comment)))
        comment = None
    return out


def type_name(value):
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}.get(type(value), "null")


START, END = "<!-- values:start (scripts/render-manifests.sh) -->", "<!-- values:end -->"


def table(values_path):
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for key, value, text in rows(values_path):
        default = json.dumps(value, separators=(",", ":")).replace("|", "\\|")
        lines.append(f"| {key} | {type_name(value)} | `{default}` | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


def main():
    readme = open(sys.argv[2]).read()
    if START not in readme or END not in readme:
        sys.exit(f"{sys.argv[2]}: the markers {START} and {END} are missing")
    head, rest = readme.split(START, 1)
    tail = rest.split(END, 1)[1]
    sys.stdout.write(f"{head}{START}\n{table(sys.argv[1])}\n{END}{tail}")


if __name__ == "__main__":
    main()
