"""Whole-run checkpoints: learner, counters and replay in one directory.

Layout of RUN_DIR/checkpoints/ckpt-<learner step, 9 digits>/:

    learner.npz     online and target weights, Adam's m, v and step count, learner step
    state.json      the coordinator's counters (env steps per actor, episodes,
                    learner steps, wall seconds, best evaluation, ...)
    manifest.json   format, time, package versions, git commit, the config, the
                    replay table (name, settings, signature), the network's shapes
    replay/         a Reverb checkpoint of the replay server: items, priorities,
                    table and rate-limiter state
    sha256.json     the SHA-256 of every file above (Reverb's included), written
                    before COMPLETE; `load` verifies them (CorruptCheckpointError
                    names the file), and a resume sets a damaged checkpoint aside
    COMPLETE        written last: a directory without it is never loaded

With replay.num_shards = S > 1 (apex.replay.shards) `replay/` is replaced by one
Reverb checkpoint per shard, named as the shard is (`shard_name`):
`replay_0/`, `replay_1/`, ..., `replay_<S-1>/`. Every shard is moved in before
COMPLETE is written, so a complete checkpoint holds all of them or none; `load`
refuses one that misses a shard (S is read from its manifest's config).

A checkpoint is assembled in `ckpt-N.partial/` and renamed when complete, so a
crash (or a SIGKILL) in the middle leaves a `.partial` directory that
`latest_complete` skips. After a new checkpoint completes, all but the newest
`checkpoint.keep` are deleted.

The live Reverb server's own checkpointer writes into RUN_DIR/replay_checkpoints
(where `tools.replay` snapshots also go); with S > 1 shards, each server has a
root of its own, RUN_DIR/replay_checkpoints/<shard name> (`replay_root`).
Reverb keeps only the newest checkpoint of its root, so each replay checkpoint
is moved out of it into its run checkpoint as soon as it is written.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from apex.checksums import CHECKSUMS_FILE, set_aside, verify, write_checksums  # noqa: F401
from apex.config import ApexConfig, to_dict
from apex.errors import (
    CheckpointError,  # noqa: F401 - re-exported: the one checkpoint error
    CorruptCheckpointError,
)
from apex.jsonio import write_json_atomic

CHECKPOINTS_DIR = "checkpoints"
REPLAY_ROOT = "replay_checkpoints"
COMPLETE = "COMPLETE"
LEARNER_FILE = "learner.npz"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
REPLAY_DIR = "replay"
FORMAT = 1
_NAME = re.compile(r"^ckpt-(\d+)$")

# Settings Reverb restores from its checkpoint (it ignores the new table's), and
# settings that change the shapes of what is stored or trained: a resume with any
# of them changed is refused, naming the field.
STRUCTURAL_FIELDS = (
    "agent",
    "env.id",
    "env.imports",
    "env.kwargs",
    "env.observation_indices",
    "env.preprocessing",
    "env.screen_size",
    "env.frame_stack",
    "learner.torso",
    "learner.conv_layers",
    "learner.conv_channels",
    "learner.hidden_sizes",
    "learner.dueling",
    "r2d2.lstm_size",
    "r2d2.sequence_length",
    "replay.capacity",
    "replay.min_size",
    "replay.samples_per_insert",
    "replay.error_buffer",
    "replay.priority_exponent",
    "replay.num_shards",
)


@dataclasses.dataclass
class Checkpoint:
    """A complete run checkpoint as read from disk."""

    path: str
    step: int
    learner: dict[str, np.ndarray]
    state: dict[str, Any]
    manifest: dict[str, Any]

    @property
    def num_shards(self) -> int:
        """Replay shards the checkpoint holds (1 for one written before shards existed)."""
        return checkpoint_num_shards(self.manifest)

    @property
    def replay_path(self) -> str:
        """The Reverb checkpoint of the replay (replay.num_shards = 1; else see `shard_path`)."""
        if self.num_shards != 1:
            raise CheckpointError(
                f"{self.path} holds {self.num_shards} replay shards: read each with shard_path(s)"
            )
        return os.path.join(self.path, REPLAY_DIR)

    def shard_path(self, shard: int) -> str:
        """The Reverb checkpoint of replay shard `shard` (S = 1: `replay_path`)."""
        return os.path.join(self.path, shard_dir(shard, self.num_shards))

    @property
    def shard_paths(self) -> list[str]:
        """Every shard's Reverb checkpoint, shard s at index s."""
        return [self.shard_path(s) for s in range(self.num_shards)]


def shard_dir(shard: int, num_shards: int) -> str:
    """The directory of replay shard `shard` in a run checkpoint: 'replay' when
    there is one shard, else the shard's name 'replay_<s>' (apex.replay.shards)."""
    from apex.replay.shards import shard_name

    return shard_name(shard, num_shards)


def checkpoint_num_shards(manifest: dict[str, Any]) -> int:
    """replay.num_shards of the config a checkpoint's manifest records (1 if absent)."""
    value = _saved_field(manifest.get("config", {}), "replay.num_shards")
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS_DIR)


def replay_root(run_dir: str, shard: int | None = None, num_shards: int = 1) -> str:
    """The live Reverb server's checkpointer root (transient; see the module doc):
    RUN_DIR/replay_checkpoints; with `shard` of `num_shards` > 1, that shard's
    server's own root RUN_DIR/replay_checkpoints/replay_<shard>."""
    root = os.path.join(run_dir, REPLAY_ROOT)
    if shard is None or int(num_shards) == 1:
        return root
    return os.path.join(root, shard_dir(shard, num_shards))


def list_complete(run_dir: str) -> list[str]:
    """Paths of the complete checkpoints of RUN_DIR, oldest first."""
    folder = checkpoints_dir(run_dir)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        m = _NAME.match(name)
        path = os.path.join(folder, name)
        if m and os.path.isfile(os.path.join(path, COMPLETE)):
            found.append((int(m.group(1)), path))
    return [p for _, p in sorted(found)]


def latest_complete(run_dir: str) -> str | None:
    """The newest complete checkpoint of RUN_DIR, or None (half-written ones are skipped)."""
    found = list_complete(run_dir)
    return found[-1] if found else None


def replay_table_manifest(config: ApexConfig, signature: Any) -> dict[str, Any]:
    from apex.agents import table_name

    r = config.replay
    return {
        "name": table_name(config),
        "capacity": r.capacity,
        "min_size": r.min_size,
        "samples_per_insert": r.samples_per_insert,
        "error_buffer": r.error_buffer,
        "priority_exponent": r.priority_exponent,
        "signature": _describe(signature),
    }


def _describe(signature: Any) -> Any:
    """A JSON form of a nest of TensorSpecs: {name: [shape, dtype]}."""
    if isinstance(signature, dict):
        return {k: _describe(v) for k, v in sorted(signature.items())}
    shape = getattr(signature, "shape", None)
    dtype = getattr(signature, "dtype", None)
    if shape is not None and dtype is not None:
        return [list(shape.as_list() if hasattr(shape, "as_list") else shape), dtype.name]
    return repr(signature)


def make_manifest(
    config: ApexConfig, signature: Any, network_shapes: list[list[int]]
) -> dict[str, Any]:
    """The manifest of a checkpoint of `config` (see the module doc)."""
    from apex.replay.shards import shard_config
    from apex.run_dir import git_commit, package_versions

    manifest = {
        "format": FORMAT,
        "created": time.time(),
        "packages": package_versions(),
        "git_commit": git_commit(),
        "config": to_dict(config),
        "table": replay_table_manifest(config, signature),
        "network_shapes": [list(s) for s in network_shapes],
    }
    num_shards = int(config.replay.num_shards)
    if num_shards > 1:  # each shard's table: the settings of shard_config
        manifest["shards"] = {
            "names": [shard_dir(s, num_shards) for s in range(num_shards)],
            "table": replay_table_manifest(shard_config(config), signature),
        }
    return manifest


def _field(config_dict: dict[str, Any], path: str, missing: Any = None) -> Any:
    value: Any = config_dict
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:
            return missing
        value = value[name]
    return value


def _as_config(value: Any) -> Any:
    """A value as the config writes it (JSON turns tuples into lists, nested ones too)."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_config(v) for v in value)
    return value


_MISSING = object()


def _saved_field(config: dict[str, Any], path: str) -> Any:
    """A field of a checkpoint's config; a field added after it was written reads as
    the field's default (what that run used)."""
    value = _field(config, path, _MISSING)
    if value is _MISSING:
        from apex.config import ApexConfig, to_dict

        value = _field(to_dict(ApexConfig()), path)
    return value


def compatibility_problems(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between a checkpoint's manifest and the manifest of the config
    to resume with, in the terms a user can act on (config fields first)."""
    problems = []
    old_cfg, new_cfg = saved.get("config", {}), current.get("config", {})
    for path in STRUCTURAL_FIELDS:
        a, b = _as_config(_saved_field(old_cfg, path)), _as_config(_field(new_cfg, path))
        if a != b:
            problems.append(f"{path} is {a!r} in the checkpoint and {b!r} now")
    if not problems:  # a difference no listed field explains: name the artefact
        saved_sig = saved.get("table", {}).get("signature")
        current_sig = current.get("table", {}).get("signature")
        if saved_sig != current_sig:
            hint = ""
            saved_keys = set(saved_sig) if isinstance(saved_sig, dict) else set()
            current_keys = set(current_sig) if isinstance(current_sig, dict) else set()
            if "obs_pair" in saved_keys and any(str(k).startswith("row_") for k in current_keys):
                hint = (
                    " (a checkpoint of transitions in three columns, from before they were "
                    "stored as one row: resume it with --config.replay.transition_layout=columns)"
                )
            elif saved_keys & {"obs_pair", "obs"} and "obs_frames" in current_keys:
                hint = (
                    " (a checkpoint of whole observations in every item, from before frames "
                    "were stored once: resume it with --config.replay.frame_storage=packed)"
                )
            elif "obs_frames" in saved_keys & current_keys:
                # compressed frames or not: a checkpoint from before the field is 'none'
                was = old_cfg.get("replay", {}).get("frame_compression", "none")
                hint = (
                    f" (its frames were stored with replay.frame_compression={was!r}: "
                    f"resume it with --config.replay.frame_compression={was})"
                )
            problems.append(
                f"the replay signature differs: {saved_sig} in the checkpoint, {current_sig} now"
                + hint
            )
        if saved.get("network_shapes") != current.get("network_shapes"):
            problems.append(
                f"the network's weight shapes differ: {saved.get('network_shapes')} in the "
                f"checkpoint, {current.get('network_shapes')} now"
            )
    return problems


def check_compatible(checkpoint: Checkpoint, current_manifest: dict[str, Any]) -> None:
    """Raises CheckpointError naming every difference that makes a resume unsafe."""
    problems = compatibility_problems(checkpoint.manifest, current_manifest)
    if problems:
        raise CheckpointError(
            f"cannot resume from {checkpoint.path} with this config: "
            + "; ".join(problems)
            + ". Resume with the checkpoint's values (its manifest.json has the whole config) "
            "or start a new run_dir."
        )


def verify_files(path: str) -> None:
    """Checks run checkpoint `path`'s files against its sha256.json
    (CorruptCheckpointError names the first that differs); for readers of its
    replay alone (tools.replay)."""
    verify(path, skip=(COMPLETE,))


def enclosing_checkpoint(path: str) -> str | None:
    """The run checkpoint that `path` (a Reverb checkpoint directory) lies in, if any."""
    parent = os.path.dirname(os.path.normpath(path))
    return parent if os.path.isfile(os.path.join(parent, CHECKSUMS_FILE)) else None


def _read(path: str, name: str, parse: Callable[[Any], Any], mode: str = "r") -> Any:
    """parse(the open file `name` of checkpoint `path`); CorruptCheckpointError if it
    does not read (OSError, JSON errors, BadZipFile of a damaged npz)."""
    try:
        with open(os.path.join(path, name), mode) as f:
            return parse(f)
    except Exception as err:  # noqa: BLE001 - named below: the checkpoint is damaged
        raise CorruptCheckpointError(f"{path} is corrupt: {type(err).__name__}: {err}") from None


def _arrays(f: Any) -> dict[str, np.ndarray]:
    with np.load(f) as data:
        return {k: data[k] for k in data.files}


def load(path: str, verify_checksums: bool = True) -> Checkpoint:
    """Reads a complete checkpoint; CheckpointError names what is missing or
    corrupt (CorruptCheckpointError: a file that does not match its checksum
    or does not read). `verify_checksums=False` for a process that reads a
    checkpoint its launcher verified just before."""
    if not os.path.isfile(os.path.join(path, COMPLETE)):
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no {COMPLETE} marker: it was being written "
            "when the run stopped)"
        )
    m = _NAME.match(os.path.basename(os.path.normpath(path)))
    manifest = _read(path, MANIFEST_FILE, lambda f: json.load(f))
    if manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} has checkpoint format {manifest.get('format')!r}; this apex reads {FORMAT}"
        )
    num_shards = checkpoint_num_shards(manifest)
    if num_shards == 1:
        if not os.path.isfile(os.path.join(path, REPLAY_DIR, "DONE")):
            raise CorruptCheckpointError(
                f"{path} is corrupt: its replay/ has no complete Reverb checkpoint"
            )
    else:
        missing = [
            shard_dir(s, num_shards)
            for s in range(num_shards)
            if not os.path.isfile(os.path.join(path, shard_dir(s, num_shards), "DONE"))
        ]
        if missing:
            raise CorruptCheckpointError(
                f"{path} is not a complete checkpoint: it misses replay shard "
                f"{', '.join(missing)} of {num_shards} (replay.num_shards={num_shards}: "
                f"{', '.join(shard_dir(s, num_shards) + '/' for s in range(num_shards))} "
                "each with a complete Reverb checkpoint)"
            )
    if verify_checksums:  # after the checks above, whose words say more
        verify_files(path)
    state = _read(path, STATE_FILE, lambda f: json.load(f))
    learner = _read(path, LEARNER_FILE, lambda f: _arrays(f), mode="rb")
    step = int(m.group(1)) if m else int(state.get("learner_steps", 0))
    return Checkpoint(path=path, step=step, learner=learner, state=state, manifest=manifest)


def write(
    run_dir: str,
    step: int,
    learner: dict[str, np.ndarray],
    state: dict[str, Any],
    manifest: dict[str, Any],
    replay_path: str | Sequence[str] | None,
    keep: int,
) -> str:
    """Assembles ckpt-<step> (see the module doc); moves `replay_path` into it: one
    Reverb checkpoint (as `replay/`), or a list of one per shard (shard s at
    index s, as `shard_dir(s, S)`: `replay/` for a list of one), every one
    before COMPLETE.

    Returns the path of the complete checkpoint. Older complete checkpoints
    beyond `keep` are deleted afterwards.
    """
    folder = checkpoints_dir(run_dir)
    final = os.path.join(folder, f"ckpt-{step:09d}")
    partial = final + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    if isinstance(replay_path, str):
        os.rename(replay_path, os.path.join(partial, REPLAY_DIR))
    elif replay_path is not None:
        for shard, shard_path in enumerate(replay_path):
            os.rename(shard_path, os.path.join(partial, shard_dir(shard, len(replay_path))))
    data = io.BytesIO()  # whole in memory first: a full disk fails the file write alone
    np.savez(data, **learner)
    with open(os.path.join(partial, LEARNER_FILE), "wb") as f:
        f.write(data.getbuffer())
        f.flush()
        os.fsync(f.fileno())
    write_json_atomic(os.path.join(partial, STATE_FILE), state)
    write_json_atomic(os.path.join(partial, MANIFEST_FILE), dict(manifest, step=step))
    write_checksums(partial, skip=(COMPLETE,))
    with open(os.path.join(partial, COMPLETE), "w") as f:
        f.write(f"{time.time()}\n")
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(final):  # the same step again (e.g. a stop right after a periodic save)
        shutil.rmtree(final)
    os.rename(partial, final)
    for old in list_complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def directory_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total
