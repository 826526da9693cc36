"""An experiment's grid and its record (DIR/experiment.json): the settings a
`--set` grid spans, the trials (setting x seed) and each trial's state.

A trial is `pending` until it starts, `running` while its launch.train runs,
then `finished` (exit 0: the run reached its own stop criterion), `stopped`
(130/143: interrupted; it resumes from its checkpoint on the next run of the
experiment) or `failed` (any other exit; `cause` says why). launch/experiment.py
runs them; tools/experiment.py reports on them.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from typing import Any

from apex import ConfigError, write_json_atomic

RECORD = "experiment.json"
PENDING, RUNNING, FINISHED, STOPPED, FAILED = "pending", "running", "finished", "stopped", "failed"
STATES = (PENDING, RUNNING, FINISHED, STOPPED, FAILED)
# Fields the experiment sets itself on every trial, from --seeds and --out.
OWN_FIELDS = ("seed", "learner.seed", "run_dir")


def split_values(text: str) -> list[str]:
    """'64,256' -> ['64', '256']; commas inside brackets or quotes stay:
    '(64, 64),(128,)' -> ['(64, 64)', '(128,)']."""
    values, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    values.append("".join(cur).strip())
    return values


def parse_sets(items: list[str]) -> dict[str, list[str]]:
    """`--set a.b=v1,v2` items -> {'a.b': ['v1', 'v2']} in the order given.
    Raises ConfigError on a malformed item, an empty or repeated value, a field
    given twice or one the experiment sets itself."""
    grid: dict[str, list[str]] = {}
    for item in items:
        path, sep, text = item.partition("=")
        path = path.strip().removeprefix("--config.").removeprefix("config.")
        if not sep or not path:
            raise ConfigError("--set", item, "the form --set <section>.<field>=<v1>,<v2>,...")
        if path in OWN_FIELDS:
            raise ConfigError(
                "--set",
                item,
                "a field other than seed, learner.seed and run_dir (the experiment sets "
                "them: --seeds, --out)",
            )
        if path in grid:
            raise ConfigError("--set", item, f"each field once ({path} is given twice)")
        values = split_values(text)
        if any(v == "" for v in values):
            raise ConfigError("--set", item, "non-empty values separated by commas")
        if len(set(values)) != len(values):
            raise ConfigError("--set", item, "distinct values (one is repeated)")
        grid[path] = values
    return grid


def parse_seeds(text: str) -> list[int]:
    """'5' -> [0..4]; '0,3,7' -> [0, 3, 7]."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            n = int(text)
            if n < 1:
                raise ValueError
            seeds = list(range(n))
    except ValueError:
        raise ConfigError(
            "--seeds", text, "a count N >= 1 (seeds 0..N-1) or a list such as 0,3,7"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError("--seeds", text, "distinct seeds >= 0")
    return seeds


def settings(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, the first field varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def setting_label(setting: dict[str, str], grid: dict[str, list[str]]) -> str:
    """The fields that vary across the grid, 'a.b=1 c.d=x' ('base' when none do)."""
    parts = [f"{k}={v}" for k, v in setting.items() if len(grid[k]) > 1]
    return " ".join(parts) or "base"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]+", "_", label.replace(" ", "+")).strip("_") or "base"


def make_trials(grid: dict[str, list[str]], seeds: list[int]) -> list[dict[str, Any]]:
    """The trials of a grid: one per setting and seed, in order (settings slowest)."""
    trials, slugs = [], set()
    for i, setting in enumerate(settings(grid)):
        label = setting_label(setting, grid)
        slug = _slug(label)
        if slug in slugs:  # two labels that differ only in characters a path cannot hold
            slug = f"{i}-{slug}"
        slugs.add(slug)
        for seed in seeds:
            trials.append(
                {
                    "id": f"{slug}/seed-{seed}",
                    "setting": label,
                    "setting_index": i,
                    "overrides": dict(setting),
                    "seed": seed,
                    "run_dir": os.path.join("trials", slug, f"seed-{seed}"),
                    "state": PENDING,
                    "cause": None,
                    "returncode": None,
                    "attempts": [],
                }
            )
    return trials


def trial_overrides(trial: dict[str, Any], out: str) -> list[tuple[str, str]]:
    """(field, text) overrides of a trial: its setting, its seed, its run_dir."""
    seed = str(trial["seed"])
    return [
        *trial["overrides"].items(),
        ("seed", seed),
        ("learner.seed", seed),
        ("run_dir", os.path.join(os.path.abspath(out), trial["run_dir"])),
    ]


def new_record(
    config: str, grid: dict[str, list[str]], seeds: list[int], *, commit: str | None, argv: list
) -> dict[str, Any]:
    return {
        "format": 1,
        "config": config,
        "grid": grid,
        "seeds": seeds,
        "commit": commit,
        "created": time.time(),
        "command": argv,
        "runs": [],
        "trials": make_trials(grid, seeds),
    }


def load_record(out: str) -> dict[str, Any] | None:
    path = os.path.join(out, RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def save_record(out: str, record: dict[str, Any]) -> None:
    os.makedirs(out, exist_ok=True)
    write_json_atomic(os.path.join(out, RECORD), record)


def check_same(record: dict[str, Any], config: str, grid: dict, seeds: list[int], out: str) -> None:
    """Refuses (ConfigError) a command whose experiment differs from the one `out` holds."""
    for field, old, new in (
        ("--config", os.path.normpath(record["config"]), os.path.normpath(config)),
        ("--set", record["grid"], grid),
        ("--seeds", record["seeds"], seeds),
    ):
        if old != new:
            raise ConfigError(
                field,
                _text(field, new),
                f"{_text(field, old)} as the experiment in {out} records ({RECORD}): a rerun "
                "resumes that experiment; a different grid needs another --out",
            )


def _text(field: str, value: Any) -> str:
    if field == "--set":
        return " ".join(f"--set {k}={','.join(v)}" for k, v in value.items()) or "(no --set)"
    if field == "--seeds":
        return ",".join(str(s) for s in value)
    return str(value)


def counts(record: dict[str, Any]) -> dict[str, int]:
    out = dict.fromkeys(STATES, 0)
    for t in record["trials"]:
        out[t["state"]] += 1
    return out


def to_run(record: dict[str, Any], retry_failed: bool) -> list[dict[str, Any]]:
    """The trials a run of the experiment starts, in order: those stopped or left
    running by an earlier run first (they resume), then pending ones, then failed
    ones when `retry_failed`; within each, seed by seed, each seed's settings in
    the grid's order (settings compared on a shared machine alternate, so slow
    spells fall on all of them). Finished trials are never rerun."""
    order = {STOPPED: 0, RUNNING: 0, PENDING: 1, FAILED: 2}
    seeds = {seed: i for i, seed in enumerate(dict.fromkeys(t["seed"] for t in record["trials"]))}
    chosen = [
        t
        for t in record["trials"]
        if t["state"] in (STOPPED, RUNNING, PENDING) or (retry_failed and t["state"] == FAILED)
    ]
    return sorted(
        chosen, key=lambda t: (order[t["state"]], seeds[t["seed"]], t.get("setting_index", 0))
    )


def failure_cause(returncode: int, output: str, summary: dict | None) -> str:
    """Why a trial failed, in one line: summary.json's failure, the launcher's
    refusal ('apex: ...'), or the last line it printed."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by {name}"
    if summary and summary.get("failure"):
        return str(summary["failure"])
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    refusal = [ln for ln in lines if ln.startswith("apex:")]
    last = refusal[-1] if refusal else (lines[-1] if lines else "no output")
    return f"exit {returncode}: {last[:500]}"


def read_summary(run_dir: str, since: float | None = None) -> dict | None:
    """RUN_DIR/summary.json (None when absent, or written before `since`: an
    earlier attempt's)."""
    path = os.path.join(run_dir, "summary.json")
    try:
        if since is not None and os.path.getmtime(path) < since - 1.0:
            return None
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def live_trial(trial: dict[str, Any]) -> int | None:
    """The pid of a trial's launch.train that still runs (an experiment killed
    with SIGKILL leaves its trials to their own stop), else None."""
    import psutil

    attempt = (trial.get("attempts") or [{}])[-1]
    pid = attempt.get("pid")
    if trial["state"] != RUNNING or not pid or attempt.get("ended") is not None:
        return None
    try:
        proc = psutil.Process(pid)
        alive = proc.status() != psutil.STATUS_ZOMBIE
        born = proc.create_time()
    except psutil.Error:
        return None
    return pid if alive and born <= attempt["started"] + 5.0 else None


def check_no_live_trials(record: dict[str, Any]) -> None:
    """Refuses (ConfigError) a rerun while a trial of an earlier one still runs."""
    for t in record["trials"]:
        pid = live_trial(t)
        if pid is not None:
            raise ConfigError(
                "--out",
                t["run_dir"],
                f"no trial still running: {t['id']}'s launch.train (pid {pid}, of an earlier "
                f"run of this experiment) is; stop it (kill -INT -{pid}) or let it end",
            )


def trial_results(out: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per trial: its summary.json plus id, setting, seed, state, cause, run_dir,
    returncode and process_seconds (of its attempts)."""
    rows = []
    for t in record["trials"]:
        run_dir = os.path.join(os.path.abspath(out), t["run_dir"])
        attempts = t.get("attempts", [])
        rows.append(
            {
                **(read_summary(run_dir) or {}),
                "id": t["id"],
                "setting": t["setting"],
                "seed": t["seed"],
                "state": t["state"],
                "cause": t.get("cause"),
                "run_dir": run_dir,
                "returncode": t.get("returncode"),
                "process_seconds": sum(
                    a["ended"] - a["started"] for a in attempts if a.get("ended") is not None
                ),
            }
        )
    return rows
