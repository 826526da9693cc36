"""The dependency set is what pyproject.toml and the lock say, and no node
imports what apex dropped (jax, gym: TF 2.8 imports jax whenever it is installed)."""

import json
import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _lock() -> dict[str, str]:
    pins = {}
    with open(os.path.join(ROOT, "requirements-py310.lock.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
            if m:
                pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_the_installed_environment_is_the_lock():
    lock = _lock()
    wrong = {}
    # What the environment installed, read from its site-packages only: `import
    # ray` puts Ray's vendored copies (ray/thirdparty_files: psutil) on sys.path.
    site = sysconfig.get_paths()["purelib"]
    installed_versions = {
        d.metadata["Name"].lower().replace("_", "-"): d.version
        for d in metadata.distributions(path=[site])
    }
    for name, version in lock.items():
        installed = installed_versions.get(name.lower().replace("_", "-"))
        if installed != version:
            wrong[name] = (version, installed)
    assert not wrong, f"(locked, installed) differ: {wrong}; run ./scripts/setup.sh"


def test_pyproject_pins_agree_with_the_lock_and_drop_jax_and_gym():
    import tomli  # pytest's own dependency on Python 3.10

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomli.load(f)["project"]
    lock = _lock()
    deps = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        deps += extra
    for dep in deps:
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", dep)
        if m:
            name = m.group(1).lower().replace("_", "-")
            assert lock.get(name) == m.group(2), f"{dep} in pyproject.toml, {lock.get(name)} locked"
    for dropped in ("jax", "jaxlib", "ml-dtypes", "scipy", "gym", "gym-notices"):
        assert dropped not in lock, f"{dropped} is locked again; apex imports none of it"


@pytest.mark.cli
def test_no_node_imports_jax_or_gym():
    """What every node process imports, in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "import launch.program, launch.nodes, apex.learner, apex.evaluation, acme\n"
        "import tools.replay\n"
        "print(json.dumps(sorted(m for m in ('jax', 'jaxlib', 'gym', 'scipy') if m in sys.modules)))"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
