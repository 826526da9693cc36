r"""Trains an apex program: `python -m launch.train --config=configs/apex_cartpole.py`.

Overrides: any config field as `--config.<section>.<field>=<value>`, e.g.
`--config.actor.num_actors=4 --config.stop.max_wall_seconds=60`.
Launch: `--lp_launch_type=local_mp` (default; one process per node),
`local_mt` (threads in one process) or `test_mt`.
Output: the run directory (config.run_dir, default runs/<time>-<config>) holds
config.json, versions.json, metrics/*.jsonl and summary.json.
"""

from __future__ import annotations

import os

# Entry-point only: quiet TensorFlow's C++ start-up logs before anything
# imports it (inherited by every node process). Errors still print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import launchpad as lp  # noqa: E402  (defines --lp_launch_type)
from absl import app, flags, logging  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)

from apex import config as apex_config  # noqa: E402
from apex.coordination import SUMMARY_KEYS  # noqa: E402
from apex.errors import ConfigError  # noqa: E402
from apex.jsonio import write_json_atomic  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "Path of a config file with get_config().")
_TERMINAL = flags.DEFINE_enum(
    "terminal",
    "current_terminal",
    ["current_terminal", "output_to_files"],
    "Where local_mp node output goes (output_to_files: $LAUNCHPAD_LOGGING_DIR).",
)

_OVERRIDES: list[tuple[str, str]] = []


def parse_argv(argv: list[str]) -> list[str]:
    """Splits `--config.a.b=v` overrides off argv (kept in _OVERRIDES); absl parses the rest."""
    rest = []
    for arg in argv:
        if arg.startswith("--config."):
            path, sep, value = arg[len("--config.") :].partition("=")
            if not sep:
                raise ConfigError(
                    f"config.{path}", arg, "the form --config.<section>.<field>=<value>"
                )
            _OVERRIDES.append((path, value))
        else:
            rest.append(arg)
    return rest


def load_config(path: str, overrides: list[tuple[str, str]]) -> apex_config.ApexConfig:
    """Loads, overrides and validates a config, including a check that the env can be made."""
    from apex.envs import env_spec

    config = apex_config.load_config_file(path)
    for field, value in overrides:
        apex_config.apply_override(config, field, value)
    apex_config.validate(config)
    env_spec(config.env)  # unknown ids and non-DQN action spaces fail here, before launch
    return config


def _finalize_summary(run_dir: str, reason: str) -> dict | None:
    """Writes summary.json from the coordinator's last state if the coordinator could not."""
    path = os.path.join(run_dir, "summary.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    state = os.path.join(run_dir, "state.json")
    if not os.path.exists(state):
        return None
    with open(state) as f:
        summary = json.load(f)
    summary["stop_reason"] = summary.get("stop_reason") or reason
    write_json_atomic(path, summary)
    return summary


def main(argv: list[str]) -> int:
    del argv
    logging.set_verbosity(logging.WARNING)
    start_time = time.time()
    if not _CONFIG.value:
        raise ConfigError("--config", None, "a config file, e.g. --config=configs/apex_cartpole.py")
    config = load_config(_CONFIG.value, _OVERRIDES)

    from apex.run_dir import default_run_dir, prepare_run_dir

    run_dir = prepare_run_dir(config.run_dir or default_run_dir(_CONFIG.value), config)
    config.run_dir = run_dir

    from launch.program import make_program

    program = make_program(config, run_dir=run_dir, start_time=start_time)
    # Launchpad's own default is local_mt; apex's is one process per node.
    launch_type = (
        flags.FLAGS.lp_launch_type if flags.FLAGS["lp_launch_type"].present else "local_mp"
    )
    print(f"[apex] run_dir: {run_dir}", flush=True)
    print(
        f"[apex] launching {launch_type}: {config.agent}, {config.actor.num_actors} actors x "
        f"{config.actor.envs_per_actor} envs on {config.env.id}; replay ratio "
        f"~{apex_config.env_step_replay_ratio(config):.2g} (SGD uses per env step at "
        f"samples_per_insert {config.replay.samples_per_insert:g})",
        flush=True,
    )
    if launch_type == "local_mp":
        os.environ.setdefault("LAUNCHPAD_LOGGING_DIR", os.path.join(run_dir, "logs"))
        manager = lp.launch(program, launch_type=launch_type, terminal=_TERMINAL.value)
    else:
        manager = lp.launch(program, launch_type=launch_type, serialize_py_nodes=False)
    failed = None
    try:
        if manager is not None:
            manager.wait()
    except Exception as err:  # noqa: BLE001 - a node failed: report it and still write the summary
        failed = err
    summary = _finalize_summary(run_dir, "node failed" if failed else "stopped")
    if summary is not None:
        print(
            "[apex] summary: " + json.dumps({k: summary.get(k) for k in SUMMARY_KEYS}), flush=True
        )
    print(f"[apex] summary.json: {os.path.join(run_dir, 'summary.json')}", flush=True)
    if failed is None and summary is not None and summary.get("stop_reason") == "node failed":
        failed = summary.get("failure") or "see the node output above"
    if failed is not None:
        print(f"[apex] a node failed: {failed}", file=sys.stderr, flush=True)
        return 1
    return 0


def run() -> None:
    try:
        app.run(main, flags_parser=lambda argv: flags.FLAGS(parse_argv(argv)))
    except ConfigError as err:
        print(f"apex: invalid configuration: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run()
