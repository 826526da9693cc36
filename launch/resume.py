"""Whether a launch continues a run: the checkpoint it resumes from (checked
against the config) and the stop limits the run has left."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from apex import ApexConfig, ConfigError, CorruptCheckpointError, checkpointing
from apex.agents import get_builder


def resume_checkpoint(
    config: ApexConfig, run_dir: str, require: bool
) -> checkpointing.Checkpoint | None:
    """The checkpoint a launch into `run_dir` continues from (None: a fresh run).

    Raises ConfigError when there is nothing to resume but a run is there (or a
    resume was required), and CheckpointError when no complete checkpoint is
    sound (damaged ones are set aside) or the newest sound one does not fit
    `config`.
    """
    has_run = os.path.isfile(os.path.join(run_dir, "config.json"))
    latest = checkpointing.latest_complete(run_dir) if os.path.isdir(run_dir) else None
    if latest is None:
        if require or has_run:
            folder = checkpointing.checkpoints_dir(run_dir)
            names = os.listdir(folder) if os.path.isdir(folder) else []
            partial = sorted(n for n in names if n.endswith(".partial"))
            why = "it holds no run" if not has_run else "it holds a run with no complete checkpoint"
            if partial:
                why += f" (only half-written ones, ignored: {', '.join(sorted(partial))})"
            raise ConfigError(
                "run_dir",
                run_dir,
                f"a new directory, or a run directory with a complete checkpoint to resume; {why}",
            )
        return None
    checkpoint = _newest_sound(run_dir)
    # Deferred: Gymnasium (the env's spec), which a config refused earlier never pays.
    from apex import env_spec

    builder = get_builder(config)
    spec = env_spec(config.env)
    shapes = _in_child(lambda: [list(w.shape) for w in builder.make_network(config, spec).weights])
    current = checkpointing.make_manifest(config, builder.item_signature(config, spec), shapes)
    checkpointing.check_compatible(checkpoint, current)
    return checkpoint


def _newest_sound(run_dir: str) -> checkpointing.Checkpoint:
    """The newest complete checkpoint that loads. A damaged one (a file that does
    not match its checksum or does not read) is set aside as ckpt-N.damaged with
    one line naming the file, and the one before it is tried; with none left,
    CheckpointError (the launcher exits 2 before anything launches)."""
    set_aside = []
    for path in reversed(checkpointing.list_complete(run_dir)):
        try:
            return checkpointing.load(path)
        except CorruptCheckpointError as err:
            moved = checkpointing.set_aside(path)
            set_aside.append(os.path.basename(moved))
            print(
                f"[apex] {err}: set aside as {os.path.relpath(moved, run_dir)}; "
                "trying the checkpoint before it",
                flush=True,
            )
    raise checkpointing.CheckpointError(
        f"{run_dir} has no sound complete checkpoint left to resume from (set aside: "
        f"{', '.join(set_aside) or 'none'}): start a new run_dir, or move one back to resume it"
    )


def _in_child(fn: Callable[[], Any]) -> Any:
    """fn()'s JSON-able result, computed in a forked child process.

    Building the network starts TensorFlow's runtime (its thread pools) in the
    process that does it, and the launcher forks its nodes (launch/zygote.py)
    only from a process without such threads: the launcher imports TensorFlow
    (2 threads, none of the runtime's) and lets a child build the network.
    Where os.fork is missing, fn() runs here (the nodes are then spawned).
    """
    import tensorflow  # noqa: F401 - imported once, here, for the child and every node

    if not hasattr(os, "fork"):
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's atexit hooks
        code = 0
        try:
            os.close(read)
            try:
                out = {"ok": fn()}
            except Exception as err:  # noqa: BLE001 - sent to the parent, raised there
                out = {"error": f"{type(err).__name__}: {err}"}
            with os.fdopen(write, "w") as f:
                json.dump(out, f)
        except BaseException:  # noqa: BLE001 - nothing may escape a forked child
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    out = json.loads(text) if text else {"error": "the child that builds the network died"}
    if "error" in out:
        raise RuntimeError(out["error"])
    return out["ok"]


def check_limits_left(config: ApexConfig, state: dict) -> None:
    """Refuses (ConfigError) a resume whose stop limits the run has already used up:
    it would launch everything only to stop at once."""
    sc = config.stop
    used = {
        "stop.max_wall_seconds": (sc.max_wall_seconds, float(state.get("wall_seconds", 0.0)), "s"),
        "stop.max_actor_steps": (
            sc.max_actor_steps,
            sum(int(v) for v in state.get("actor_steps", {}).values()),
            "env steps",
        ),
        "stop.max_learner_steps": (
            sc.max_learner_steps,
            int(state.get("learner_steps", 0)),
            "learner steps",
        ),
    }
    for field, (limit, so_far, unit) in used.items():
        if limit is not None and so_far >= limit:
            raise ConfigError(
                field,
                limit,
                f"more than the {so_far:,.6g} {unit} the run already has (raise it with "
                f"--config.{field}=... to continue, or None for no limit)",
            )
