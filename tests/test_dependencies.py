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


def test_pyproject_pins_agree_with_the_lock_and_drop_jax_and_gym_scipy_for_tests_only():
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
    for dropped in ("jax", "jaxlib", "ml-dtypes", "gym", "gym-notices"):
        assert dropped not in lock, f"{dropped} is locked again; apex imports none of it"
    # scipy only for the tests: a launch with it installed must still fork its nodes.
    extras = project["optional-dependencies"]
    holders = [k for k, v in extras.items() if any(d.startswith("scipy") for d in v)]
    assert holders == ["dev"], holders
    assert not any(d.startswith("scipy") for d in project["dependencies"])


# Who imports a dropped package, in a fresh interpreter: an import hook records,
# for each first import (or attempt: an absent package is looked for too) of a
# WATCHED top-level package, the module whose code asked for it. TensorFlow
# imports jax, and scipy through its Keras, whenever they are installed (MinAtar,
# a README option, brings scipy): that is TensorFlow's choice, not apex's.
WATCHED = ("jax", "jaxlib", "gym", "scipy")
ALLOWED_IMPORTERS = ("tensorflow", "keras", "tensorboard", *WATCHED)
_WHO_IMPORTS = """
import json, sys
WATCHED = %r
asked = {}

class Who:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in WATCHED and top not in asked and top not in sys.modules:
            f = sys._getframe(1)
            while f is not None and f.f_globals.get("__name__", "").startswith("importlib"):
                f = f.f_back
            asked[top] = f.f_globals.get("__name__", "?") if f is not None else "?"
        return None

sys.meta_path.insert(0, Who())
%s
print(json.dumps(asked))
"""


def _who_imports(code: str) -> dict[str, str]:
    """{watched package: the module that first imported (or tried to) it} when `code` runs."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, "-c", _WHO_IMPORTS % (WATCHED, code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _by_apex(asked: dict[str, str]) -> dict[str, str]:
    """The imports of `asked` that apex (or another package than TensorFlow's own) made."""
    return {
        pkg: importer
        for pkg, importer in asked.items()
        if importer.split(".")[0] not in ALLOWED_IMPORTERS
    }


@pytest.mark.cli
def test_no_node_imports_jax_or_gym():
    """What every node process imports, in a fresh interpreter: none of apex's own
    modules (nor acme, Reverb, Launchpad) import jax, gym or scipy, whatever the
    environment holds; TensorFlow may when they are installed."""
    asked = _who_imports(
        "import launch.program, launch.nodes, apex.learner, apex.evaluation, acme\n"
        "import tools.replay"
    )
    assert _by_apex(asked) == {}, asked


@pytest.mark.cli
def test_the_import_check_catches_an_apex_module_importing_gym_or_jax():
    # The check above still fails when apex's code imports one (installed or not).
    code = (
        "for pkg in ('gym', 'jax'):\n"
        "    try:\n"
        "        exec('import ' + pkg, {'__name__': 'apex.envs'})\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    assert _by_apex(_who_imports(code)) == {"gym": "apex.envs", "jax": "apex.envs"}
