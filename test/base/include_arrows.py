#!/usr/bin/env python3
"""Checks the include arrows of cmake/rooms.txt over a source tree (docs/architecture.md, "Rooms").

    include_arrows.py ROOT

Fails, naming the file, the line and the arrow, on:
  - an `#include "R/..."` of a room R from a file of a room that does not reach R through the arrows, or from a part
    (cmake/rooms.txt `part`) whose rooms do not reach R;
  - a room target (ROOM/CMakeLists.txt, gpuckpt_ROOM) that links other rooms than its arrows say;
  - a table with a cycle or an arrow to a room it does not name.
Prints what it checked when all is well.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SKIP_DIRS = {".git", "build", "build-fuzz", "fixtures", "third_party"}


def read_table(path):
    rooms, parts = {}, {}
    for number, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(room|part)\s+([\w.-]+):\s*(.*)", line)
        if not m:
            sys.exit(f"{path}:{number}: not `room NAME: ROOMS` or `part DIR: ROOMS`: {line}")
        (rooms if m.group(1) == "room" else parts)[m.group(2)] = m.group(3).split()
    return rooms, parts


def reach(rooms, start):
    """The rooms reachable from the rooms in `start` (themselves included)."""
    seen, todo = set(), list(start)
    while todo:
        r = todo.pop()
        if r not in seen:
            seen.add(r)
            todo.extend(rooms.get(r, []))
    return seen


def table_errors(rooms, parts):
    errors = []
    for owner, links in list(rooms.items()) + list(parts.items()):
        for r in links:
            if r not in rooms:
                errors.append(f"cmake/rooms.txt: {owner} -> {r}: no room {r}")
    for room in rooms:
        if room in reach(rooms, rooms[room]):
            errors.append(f"cmake/rooms.txt: {room} reaches itself: the arrows have a cycle")
    return errors


def target_errors(root, rooms):
    errors = []
    for room, links in rooms.items():
        cmake = os.path.join(root, room, "CMakeLists.txt")
        if not os.path.isfile(cmake):
            errors.append(f"{room}/CMakeLists.txt: missing (cmake/rooms.txt names room {room})")
            continue
        text = re.sub(r"#[^\n]*", "", open(cmake).read())
        linked = set()
        for m in re.finditer(r"target_link_libraries\(\s*gpuckpt_" + re.escape(room) + r"\b([^)]*)\)", text):
            linked |= {t[len("gpuckpt_"):] for t in m.group(1).split() if t[len("gpuckpt_"):] in rooms}
        if linked != set(links):
            errors.append(f"{room}/CMakeLists.txt: gpuckpt_{room} links rooms {' '.join(sorted(linked)) or '(none)'}, "
                          f"cmake/rooms.txt says {' '.join(sorted(links)) or '(none)'}")
    return errors


def include_errors(root, rooms, parts):
    errors, checked = [], 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        rel_dir = os.path.relpath(directory, root)
        top = rel_dir.split(os.sep)[0]
        if top in rooms:
            allowed, owner = reach(rooms, [top]), f"room {top}"
        elif top in parts:
            allowed, owner = reach(rooms, parts[top]), f"{top}/"
        else:
            continue
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".c", ".cc")):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1).split("/")[0]
                if target not in rooms:
                    continue
                checked += 1
                if target not in allowed:
                    errors.append(f"{rel}:{number}: includes {m.group(1)}, but {owner} reaches only "
                                  f"{' '.join(r for r in rooms if r in allowed)} (cmake/rooms.txt)")
    return errors, checked


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    table = os.path.join(root, "cmake", "rooms.txt")
    if not os.path.isfile(table):
        sys.exit(f"{table}: missing")
    rooms, parts = read_table(table)
    errors = table_errors(rooms, parts)
    if not errors:
        errors += target_errors(root, rooms)
    found, checked = include_errors(root, rooms, parts)
    errors += found
    if errors:
        print("\n".join(errors), file=sys.stderr)
        print(f"{len(errors)} include arrow(s) crossed: move the code down, or change cmake/rooms.txt, the rooms' "
              "CMakeLists.txt and docs/architecture.md together", file=sys.stderr)
        return 1
    print(f"{checked} includes of {len(rooms)} rooms from rooms and {len(parts)} restricted parts, each along an arrow")
    return 0


if __name__ == "__main__":
    sys.exit(main())
