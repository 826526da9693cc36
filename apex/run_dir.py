"""The run directory: resolved config, package versions, git commit."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from typing import Any

from apex.config import ApexConfig, to_dict
from apex.errors import ConfigError
from apex.jsonio import write_json_atomic

PACKAGES = (
    "apex",
    "tensorflow-cpu",
    "tensorflow",
    "dm-reverb",
    "dm-launchpad",
    "dm-acme",
    "gymnasium",
    "numpy",
    "protobuf",
    "absl-py",
    "jax",
    "ale-py",
)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(path: str | None = None) -> str | None:
    """HEAD of the git checkout holding `path` (None outside git), '+dirty' if modified."""
    cwd = path or os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def default_run_dir(config_path: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = os.path.splitext(os.path.basename(config_path))[0] if config_path else "run"
    return os.path.join("runs", f"{stamp}-{name}-{os.getpid()}")


def prepare_run_dir(
    run_dir: str,
    config: Any,
    argv: list[str] | None = None,
    env_packages: dict[str, str | None] | None = None,
) -> str:
    """Creates `run_dir` and writes config.json, versions.json; returns its absolute path.

    `env_packages`: the packages the env came from (apex.envs.PreparedEnv.packages),
    recorded as versions.json's "env_packages".

    Raises ConfigError naming run_dir when it cannot be created or written.
    """
    path = os.path.abspath(run_dir)
    try:
        os.makedirs(os.path.join(path, "metrics"), exist_ok=True)
        probe = os.path.join(path, ".write_probe")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise ConfigError(
            "run_dir", run_dir, f"a directory that can be created and written ({err.strerror})"
        ) from None
    write_json_atomic(os.path.join(path, "config.json"), to_dict(config))
    write_json_atomic(
        os.path.join(path, "versions.json"),
        {
            "packages": package_versions(),
            "env_packages": env_packages or {},
            "git_commit": git_commit(),
            "argv": argv or sys.argv,
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
    )
    return path


def run_setting(run_dir: str, path: str) -> Any:
    """The config value at dotted `path` (e.g. 'logging.stall_seconds') that the run in
    RUN_DIR used (its config.json), or the current default if it is not recorded there."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            value: Any = json.load(f)
        for name in path.split("."):
            value = value[name]
        return value
    except (OSError, KeyError, TypeError, ValueError):
        value = ApexConfig()
        for name in path.split("."):
            value = getattr(value, name)
        return value
