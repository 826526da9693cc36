"""The `apex` command (launch/cli.py, pyproject.toml's [project.scripts]): its
subcommands run the entry-point modules with their own flags and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launch.cli import COMMANDS
from tests.procs import ROOT

APEX = os.path.join(os.path.dirname(sys.executable), "apex")

pytestmark = pytest.mark.cli


def _apex(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([APEX, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_apex_help_lists_every_subcommand():
    out = _apex("--help")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines() if line.startswith("  ")] == list(
        COMMANDS
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_subcommand_help_is_its_modules_and_exits_0(command):
    out = _apex(command, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert COMMANDS[command][0] in out.stdout + out.stderr  # the module's own usage names it


@pytest.mark.parametrize("case", [pytest.param("unknown", id="apex_unknown_command")])
def test_no_command_or_an_unknown_one_is_one_line_and_exit_2(case):
    bare = _apex()
    assert bare.returncode == 2 and bare.stderr.startswith("usage: apex COMMAND")
    wrong = _apex("trian")
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == (
        "apex: unknown command 'trian'; one of: train, experiment, status, plot, replay, "
        "policy (apex --help)"
    )


def test_apex_train_is_launch_train_refusing_a_bad_config_with_exit_2():
    out = _apex("train", "--config=configs/apex_cartpole.py", "--config.replay.capacity=-1")
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip() == (
        "apex: invalid configuration: replay.capacity=-1 is invalid: expected an integer >= 1"
    )
