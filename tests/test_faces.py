"""apex's curated faces: `apex`, `apex.replay`, `apex.agents` and `apex.compat`.

launch/, tools/ and bench/ import apex only through these four modules (a user's
script too); everything else under apex/ is free to move. Two checks: every name
a face offers resolves, its TensorFlow-heavy names only on first use, and no
file of launch/, tools/ or bench/ reaches past a face.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import ROOT

FACES = ("apex", "apex.replay", "apex.agents", "apex.compat")
LISTED = ("apex", "apex.replay", "apex.agents")  # the faces with an __all__
CALLERS = ("launch", "tools", "bench")
# What importing a face must not import (its lazy names do, on first use).
HEAVY = {"tensorflow", "reverb", "launchpad", "keras", "acme", "courier", "gymnasium"}


def _offered(face: str) -> set[str] | None:
    """The names `face` offers (its __all__), or None for apex.compat (no __all__:
    any public attribute)."""
    return set(importlib.import_module(face).__all__) if face in LISTED else None


def violations(source: str, path: str, offered: dict[str, set[str] | None]) -> list[str]:
    """Each import in `source` that reaches past the faces, in line order: `from
    apex.<not a face> import ...`, `import apex.<not a face>`, or a name a face does
    not offer (apex.compat: a private one)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, path)):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "apex" and alias.name not in FACES:
                    found.append((node.lineno, f"{where} import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module.split(".")[0] != "apex":
                continue
            if module not in FACES:
                found.append((node.lineno, f"{where} from {module} import ..."))
                continue
            names = offered[module]
            for alias in node.names:
                if alias.name not in names if names is not None else alias.name.startswith("_"):
                    found.append((node.lineno, f"{where} from {module} import {alias.name}"))
    return [text for _, text in sorted(found)]


def test_launch_tools_and_bench_import_apex_only_through_its_faces():
    offered = {face: _offered(face) for face in FACES}
    files = sorted(
        p
        for d in CALLERS
        for p in Path(ROOT, d).rglob("*.py")
        # not a virtual environment in there (a venv of a peer, say)
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    )
    assert len(files) > 30, files  # the scan saw the callers
    found, seen = [], 0
    for path in files:
        source = path.read_text()
        seen += source.count("from apex")
        found += violations(source, str(path.relative_to(ROOT)), offered)
    assert seen > 50, seen  # they do import apex, and the scan read those imports
    assert found == [], "\n".join(found)


def test_the_scan_finds_an_import_past_the_faces():
    offered = {face: _offered(face) for face in FACES}
    source = (
        "from apex import ApexConfig\n"
        "from apex.replay import shard_name\n"
        "from apex import compat\n"
        "def f():\n"
        "    from apex.learner import Learner\n"  # past the faces, inside a function
        "import apex.envs\n"
        "from apex import no_such_name\n"
        "from apex.compat import _require\n"
    )
    assert violations(source, "x.py", offered) == [
        "x.py:5 from apex.learner import ...",
        "x.py:6 import apex.envs",
        "x.py:7 from apex import no_such_name",
        "x.py:8 from apex.compat import _require",
    ]


def test_every_name_a_face_offers_resolves_the_heavy_ones_on_first_use():
    # A fresh process: importing the faces imports none of HEAVY; then every name
    # in each __all__ resolves (the lazy ones import their module then).
    code = f"""
import json, sys
import apex, apex.agents, apex.compat, apex.replay
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({sorted(HEAVY)!r}))
missing, unlisted, undocumented = [], [], []
for face in (apex, apex.replay, apex.agents):
    doc = face.__doc__ or ""
    for name in face.__all__:
        try:
            getattr(face, name)
        except AttributeError:
            missing.append(face.__name__ + "." + name)
        if name not in dir(face):
            unlisted.append(face.__name__ + "." + name)
        if name != "__version__" and name not in doc:
            undocumented.append(face.__name__ + "." + name)
print(json.dumps(dict(heavy=heavy, missing=missing, unlisted=unlisted,
                      undocumented=undocumented, counts=[len(apex.__all__),
                      len(apex.replay.__all__), len(apex.agents.__all__)])))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], result["heavy"]
    assert result["missing"] == [], result["missing"]
    assert result["unlisted"] == [], result["unlisted"]
    assert result["undocumented"] == [], result["undocumented"]
    assert all(n > 0 for n in result["counts"]), result["counts"]


@pytest.mark.parametrize("face", LISTED)
def test_a_face_lists_each_name_once_and_refuses_an_unknown_one(face):
    module = importlib.import_module(face)
    assert len(module.__all__) == len(set(module.__all__))
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018 - the lookup is the test


@pytest.mark.parametrize("face", LISTED)
def test_a_faces_docstring_shows_an_example(face):
    assert "Example" in (importlib.import_module(face).__doc__ or ""), face
