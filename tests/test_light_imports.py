"""launch.train refuses a bad flag or config without importing TensorFlow, Reverb,
Launchpad's package, Keras or acme: about a second of CPU instead of five, in
each of the suite's many refusal subprocesses (tests/test_bad_inputs.py,
tests/test_config.py, ...). The observable is the import list (`python -X
importtime`), not a timing.

Not marked cli: these subprocesses import none of TensorFlow (that is the point),
so they cost what an in-process test does.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.procs import ROOT

# Top-level packages a refusal must not import (launchpad.flags and
# launchpad.context, which define --lp_launch_type, are imported: absl and enum only).
HEAVY = {"tensorflow", "reverb", "launchpad", "keras", "acme", "courier"}


def _imported(stderr: str) -> set[str]:
    """The modules `python -X importtime` reported importing."""
    return {
        m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", stderr, re.M)
    }


def _refuse(*args: str) -> tuple[str, set[str]]:
    """Runs `python -X importtime -m launch.train ARGS`, which must exit 2; returns
    (its stderr less the import lines, the modules it imported)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "launch.train", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    message = "\n".join(
        line for line in proc.stderr.splitlines() if not line.startswith("import time:")
    )
    assert proc.returncode == 2, message[-2000:]
    assert proc.stdout == "", proc.stdout[-2000:]
    return message, _imported(proc.stderr)


@pytest.mark.parametrize(
    "args,message",
    [
        pytest.param(
            ["--config.actor.num_actors=-1"],
            "actor.num_actors=-1 is invalid: expected an integer >= 1",
            id="invalid_field",
        ),
        pytest.param(
            ["--lp_launch_type=test_mt"],
            "--lp_launch_type='test_mt' is invalid: expected one of local_mp, local_mt",
            id="unsupported_launch_type",
        ),
        pytest.param(
            ["--config.env.id=Pendulum-v1"],  # refused once the env is made
            "env.id='Pendulum-v1' is invalid: expected an env with a Discrete action space",
            id="env_refused",
        ),
        pytest.param(
            ["--config.learner.torso=conv"],  # CartPole's 1-D observations: check_torso
            "a conv torso needs 2-D (H, W) or 3-D",
            id="torso_refused",
        ),
    ],
)
def test_a_refusal_imports_no_heavy_library(args, message, tmp_path):
    run_dir = tmp_path / "never"
    err, modules = _refuse(
        "--config=configs/apex_cartpole.py", f"--config.run_dir={run_dir}", *args
    )
    assert err.startswith("apex: invalid configuration: ") and message in err, err
    assert len(err.splitlines()) == 1, err
    assert modules & HEAVY == set(), sorted(modules & HEAVY)
    assert not run_dir.exists()


def test_a_refusal_inside_the_launch_imports_no_heavy_library(tmp_path):
    """A taken replay.port is refused in _launch, after the config, the env and the
    torso check: the program's modules are imported only after every refusal."""
    run_dir = tmp_path / "never"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err, modules = _refuse(
            "--config=configs/apex_cartpole.py",
            f"--config.replay.port={port}",
            f"--config.run_dir={run_dir}",
        )
    assert f"replay.port={port} is invalid: expected a free port; it is in use" in err, err
    assert modules & HEAVY == set(), sorted(modules & HEAVY)
    assert not run_dir.exists()


def test_launchpad_imported_after_its_flags_is_whole():
    """launch.train runs launchpad.flags alone; a later `import launchpad` (the
    launch, or any module) gets the whole package, its flags defined once by it."""
    code = """
import sys
from absl import flags
import launch.train as train
assert "launchpad" not in sys.modules
from apex import compat
lp = compat.import_launchpad()
assert lp.flags is sys.modules["launchpad.flags"] and lp.LAUNCH_TYPE is lp.flags.LAUNCH_TYPE
assert lp.context is sys.modules["launchpad.context"] and lp.LaunchType is lp.context.LaunchType
assert callable(lp.launch)
for name in ("lp_launch_type", "lp_termination_notice_secs", "tmux_session_name"):
    assert flags.FLAGS.find_module_defining_flag(name) == "launchpad.flags", name
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=110
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize(
    "args,defined",
    [
        (["--config=c.py", "--lp_launch_type=local_mt", "--noverbose"], True),
        (["--terminal", "output_to_files", "--", "--anything"], True),
        (["--no_such_flag_anywhere=1"], False),  # absl's suggestions come from every flag
        (["--helpfull"], False),  # lists the flags of every module
        (["--flagfile=f.txt"], False),
    ],
)
def test_which_command_lines_import_the_flag_defining_modules_first(args, defined):
    import launch.train  # noqa: F401 - defines the flags these command lines name
    from launch import cli_flags

    assert cli_flags.only_defined_flags(args) is defined


@pytest.mark.parametrize(
    "module,flag,text",
    [
        ("launch.train", "--help", "--config"),
        ("launch.train", "--helpshort", "--config"),
        ("tools.status", "--help", "--json"),
        ("tools.replay", "--help", "--interval"),
        ("tools.plot", "--help", "--out"),
        ("tools.policy", "--help", "export"),
    ],
)
def test_help_of_the_entry_point_and_every_tool_exits_0_with_its_flags(module, flag, text):
    # absl's help flags exit 1; a user's script (`python -m tools.status --help && ...`)
    # expects 0. A bad flag still fails (test_bad_inputs, and just below).
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert text in proc.stdout + proc.stderr
    assert not (_imported(proc.stderr) & HEAVY)


def test_a_bad_flag_of_a_tool_still_exits_non_zero():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.status", "--no_such_flag"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode not in (0, None)
    assert "no_such_flag" in proc.stderr


def _closed_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _finished_run(tmp_path) -> str:
    """A stopped run's directory as the tools see it: config.json, a stopped
    node's heartbeat, a metrics row, and the replay_address it leaves behind
    (nobody listens there any more)."""
    import json
    import os

    run_dir = tmp_path / "run"
    (run_dir / "heartbeats").mkdir(parents=True)
    (run_dir / "metrics").mkdir()
    (run_dir / "config.json").write_text(json.dumps({"logging": {"stall_seconds": 30.0}}))
    beat = {  # as apex.heartbeat writes it
        "node": "learner",
        "pid": 1 << 22,
        "host": os.uname().nodename,
        "time": 1.0,
        "received": 1.0,
        "period_seconds": 1.0,
        "state": "stopped",
        "state_since": 1.0,
        "state_seconds": 0.0,
        "rate_per_second": 25.0,
        "rss_mb": 300.0,
        "counters": {"steps": 300},
    }
    (run_dir / "heartbeats" / "learner.json").write_text(json.dumps(beat))
    (run_dir / "metrics" / "learner.jsonl").write_text(json.dumps({"learner/steps": 300}) + "\n")
    (run_dir / "replay_address").write_text(f"localhost:{_closed_port()}\n")
    return str(run_dir)


def _tool(module: str, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    return proc, _imported(proc.stderr)


def test_status_of_a_finished_run_imports_neither_tensorflow_nor_reverb(tmp_path):
    """Issue 27: tools.status asks a replay server only when its address answers a
    TCP connect; a stopped run's (its replay_address stays) is refused first."""
    proc, modules = _tool("tools.status", _finished_run(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "learner" in proc.stdout
    assert not (modules & HEAVY), sorted(modules & HEAVY)


def test_replay_on_a_stopped_run_without_a_checkpoint_imports_no_heavy_library(tmp_path):
    """tools.replay finds the server gone with a TCP connect before it imports
    Reverb (docs/observability.md: every verb that reads replay imports Reverb and
    TensorFlow, a live server's or a checkpoint's; this one reads none)."""
    run_dir = _finished_run(tmp_path)
    for verb in ("stats", "watch", "priorities"):
        proc, modules = _tool("tools.replay", verb, f"--run_dir={run_dir}")
        assert proc.returncode == 1, (verb, proc.stderr[-2000:])
        assert "has no complete checkpoint to read instead" in proc.stderr, verb
        assert not (modules & HEAVY), (verb, sorted(modules & HEAVY))
