#!/usr/bin/env python3
"""Checks that every command the docs gave at a git ref is still documented.

    python3 scripts/check_doc_commands.py [REF]      # REF: 02964d4 by default

Takes the command lines of README.md and docs/*.md at REF (in code blocks or
inline code: `.venv/bin/python ...`, `python -m ...`, `./scripts/...`, `apex ...`,
`ray ...`, `sudo ...`), normalises them (`.venv/bin/python -m launch.train`,
`python -m launch.train` and `apex train` are one command; quotes, comments,
line continuations and runs of spaces do not count) and looks for each among
the commands of the current README.md and docs/*.md. Prints the missing ones;
exits 1 if any is missing, 0 otherwise. Standard library only.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess
import sys

DEFAULT_REF = "02964d4"
ROOT = pathlib.Path(__file__).resolve().parent.parent
# `python -m MODULE` and `apex COMMAND` are one entry point (launch/cli.py).
MODULES = {
    "launch.train": "train",
    "launch.experiment": "experiment",
    "tools.status": "status",
    "tools.plot": "plot",
    "tools.replay": "replay",
    "tools.policy": "policy",
}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
INLINE = re.compile(r"(`+)(.+?)\1")
SEPARATORS = ("&&", "||", ";", "|")


def start(tokens: list[str]) -> int:
    """Index of the program's name, after `sudo` and VAR=value words."""
    i = 0
    while i < len(tokens) and (tokens[i] == "sudo" or ASSIGNMENT.match(tokens[i])):
        i += 1
    return i


def is_command(tokens: list[str]) -> bool:
    """Whether tokens are a shell command a user runs (not prose in backticks)."""
    i = start(tokens)
    if i == len(tokens):
        return False
    first, second = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
    if first.startswith(("./scripts/", ".venv/bin/")) or (i and tokens[i - 1] == "sudo"):
        return True
    if first in ("python", "python3"):
        return second in ("-m", "-c") or ".py" in second
    if first == "apex":
        return second in MODULES.values() or second == "--help"
    if first == "ray":
        return second in ("start", "stop", "status")
    if first == "bash":
        return second.endswith(".sh") or "/" in second
    return first == "tensorboard" and second.startswith("--")


def split_chain(line: str) -> list[list[str]]:
    """The shell words of each command of `a && b`, `a; b`, `a | b`; comments dropped."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: plain words
        tokens = re.split(r"\s+#", line, maxsplit=1)[0].split()
    chain: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            chain.append([])
        elif token.endswith(";"):
            chain[-1].append(token[:-1])
            chain.append([])
        else:
            chain[-1].append(token)
    return [c for c in chain if c]


def normalise(tokens: list[str]) -> str:
    """One spelling per command: the `apex` form of the entry points."""
    out, i = list(tokens), start(tokens)
    out[i] = out[i].removeprefix(".venv/bin/")
    if out[i] == "python3":
        out[i] = "python"
    if out[i : i + 2] == ["python", "-m"] and i + 2 < len(out) and out[i + 2] in MODULES:
        out[i : i + 3] = ["apex", MODULES[out[i + 2]]]
    return " ".join(out)


def commands(text: str) -> set[str]:
    """The normalised commands of one markdown file."""
    candidates: list[str] = []
    prose: list[str] = []
    fenced, pending = False, ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if pending or fenced or raw.startswith("    "):  # a code line
            line = pending + raw.strip()
            pending = line[:-1] + " " if line.endswith("\\") else ""
            if not pending:
                candidates.append(line)
        if not fenced:
            prose.append(raw)
    # Inline code may wrap over lines: each paragraph is joined before looking.
    for paragraph in "\n".join(prose).split("\n\n"):
        candidates += [span.strip() for _, span in INLINE.findall(paragraph.replace("\n", " "))]
    return {normalise(t) for line in candidates for t in split_chain(line) if is_command(t)}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def main(argv: list[str]) -> int:
    ref = argv[1] if len(argv) > 1 else DEFAULT_REF
    old = ["README.md"] + [
        n for n in git("ls-tree", "--name-only", ref, "docs/").split() if n.endswith(".md")
    ]
    current: set[str] = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        current |= commands(path.read_text())
    padded = [f" {c} " for c in current]
    missing, total = [], 0
    for path in old:
        for command in sorted(commands(git("show", f"{ref}:{path}"))):
            total += 1
            if not any(f" {command} " in c for c in padded):
                missing.append(f"missing (from {path} at {ref}): {command}")
    print("\n".join(missing + [f"{total - len(missing)} of {total} old commands found"]))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
