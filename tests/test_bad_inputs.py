"""Bad inputs and what each gets: one case per row of docs/bad_inputs.md (same ids).

Every case checks the user-facing message: for a config, that it names the field
(or flag/path), the bad value and what would be valid; for the tools, one clear
line naming the address or path, an exit code, and no Python traceback.

Most cases run in-process (load_config with overrides, parse_argv,
prepare_run_dir, check_port_free, tools.status.main). tools.replay and
tools.status both define --json, so they cannot share a process: every
tools.replay case runs through tools.replay.main in ONE helper process. Two
cases run the real entry points, where the exit code and stderr are the point.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from apex.config import ApexConfig
from apex.errors import ConfigError
from tests.procs import run_tool_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = os.path.join(ROOT, "configs", "apex_cartpole.py")
R2D2 = os.path.join(ROOT, "configs", "r2d2_cartpole_masked.py")  # L=20, P=10, burn_in=10
ATARI = os.path.join(ROOT, "configs", "apex_atari.py")


def _message_names(err: ConfigError, field: str, shown: str, valid: str) -> None:
    """The message is 'FIELD=VALUE is invalid: expected VALID...'."""
    msg = str(err)
    assert err.field == field, msg
    assert msg.startswith(f"{field}={shown} is invalid: expected "), msg
    assert valid in msg, msg


# --------------------------------------------------------------------------- config values,
# override syntax, environments, ports: load_config(file, overrides), as launch.train does.

C = CARTPOLE
A = ATARI
LOAD_CASES = [
    # config values
    (C, [("replay.capacity", "0")], "replay.capacity", "0", "an integer >= 1", "capacity_zero"),
    (C, [("replay.capacity", "-5")], "replay.capacity", "-5", "an integer >= 1", "capacity_negative"),
    (C, [("learner.batch_size", "0")], "learner.batch_size", "0", "an integer >= 1", "batch_size_zero"),
    (C, [("learner.steps_per_call", "0")], "learner.steps_per_call", "0", "an integer >= 1", "steps_per_call_zero"),
    (C, [("actor.num_actors", "0")], "actor.num_actors", "0", "an integer >= 1", "num_actors_zero"),
    (C, [("actor.envs_per_actor", "-1")], "actor.envs_per_actor", "-1", "an integer >= 1", "envs_per_actor_negative"),
    (C, [("learner.learning_rate", "-0.001")], "learner.learning_rate", "-0.001", "a number > 0", "learning_rate_negative"),
    (C, [("learner.learning_rate", "nan")], "learner.learning_rate", "nan", "a number > 0", "learning_rate_nan"),
    (C, [("replay.n_step", "0")], "replay.n_step", "0", "an integer >= 1", "n_step_zero"),
    (C, [("replay.discount", "1.5")], "replay.discount", "1.5", "a number in [0, 1]", "discount_above_one"),
    (C, [("replay.discount", "-0.1")], "replay.discount", "-0.1", "a number in [0, 1]", "discount_negative"),
    (C, [("replay.samples_per_insert", "0")], "replay.samples_per_insert", "0.0", "a number > 0", "samples_per_insert_zero"),
    (C, [("replay.min_size", "50000")], "replay.min_size", "50000", "at most replay.capacity (20000)", "min_size_above_capacity"),
    (C, [("replay.error_buffer", "10")], "replay.error_buffer", "10.0", "None or >= 64", "error_buffer_below_batch"),
    (C, [("learner.batch_size", "50000")], "learner.batch_size", "50000", "at most replay.capacity (20000)", "batch_above_capacity"),
    (C, [("replay.capacity", "32"), ("replay.min_size", "10")], "learner.batch_size", "64", "at most replay.capacity (32)", "capacity_below_batch"),
    (C, [("agent", "dqn")], "agent", "'dqn'", "one of ['apex_dqn', 'r2d2']", "unknown_agent"),
    (C, [("replay.insert_priority", "loudest")], "replay.insert_priority", "'loudest'", "one of ['actor_td', 'max_seen', 'constant']", "unknown_insert_priority"),
    (C, [("replay.frame_storage", "zstd")], "replay.frame_storage", "'zstd'", "one of ['auto', 'packed']", "unknown_frame_storage"),
    (C, [("replay.transition_layout", "rows")], "replay.transition_layout", "'rows'", "one of ['auto', 'columns']", "unknown_transition_layout"),
    (C, [("replay.frame_compression", "brotli")], "replay.frame_compression", "'brotli'", "one of ['zstd', 'lz4', 'none']", "unknown_frame_compression"),
    (R2D2, [("r2d2.sequence_period", "30")], "r2d2.sequence_period", "30", "at most r2d2.sequence_length (20)", "r2d2_period_above_length"),
    (R2D2, [("r2d2.burn_in", "19")], "r2d2.burn_in", "19", "less than r2d2.sequence_length - 1 (19)", "r2d2_burn_in_too_large"),
    (C, [("logging.epsilon_bands", "(0.1, 0.01)")], "logging.epsilon_bands", "(0.1, 0.01)", "a tuple of increasing numbers in (0, 1)", "epsilon_bands_not_increasing"),
    (C, [("stop.max_actor_steps", "None"), ("stop.max_wall_seconds", "None")], "stop", "'no limit'", "at least one of stop.max_actor_steps, stop.max_learner_steps", "no_stop_criterion"),
    # override syntax
    (C, [("actr.num_actors", "3")], "actr.num_actors", "'3'", "an existing field; the config has: actor, agent", "unknown_section"),
    (C, [("actor.num_actorz", "3")], "actor.num_actorz", "'3'", "an existing field; 'actor' has: envs_per_actor", "unknown_field"),
    (C, [("actor", "3")], "actor", "'3'", "a leaf field; 'actor' is a section with: envs_per_actor", "section_given_a_value"),
    (C, [("actor.num_actors.x", "3")], "actor.num_actors.x", "'3'", "a path through sections; 'actor.num_actors' is a value", "path_through_a_value"),
    (C, [("actor.num_actors", "many")], "actor.num_actors", "'many'", "an integer", "int_not_a_number"),
    (C, [("actor.num_actors", "2.5")], "actor.num_actors", "'2.5'", "an integer", "int_given_a_float"),
    (C, [("stop.when_solved", "maybe")], "stop.when_solved", "'maybe'", "a boolean (true/false)", "bool_not_a_boolean"),
    (C, [("replay.error_buffer", "abc")], "replay.error_buffer", "'abc'", "a number", "optional_float_not_a_number"),
    (C, [("learner.hidden_sizes", "(64,")], "learner.hidden_sizes", "'(64,'", "a tuple literal such as (128, 128)", "hidden_sizes_bad_literal"),
    (C, [("learner.hidden_sizes", "'wide'")], "learner.hidden_sizes", "\"'wide'\"", "a tuple literal such as (128, 128)", "hidden_sizes_not_a_tuple"),
    (C, [("learner.hidden_sizes", "(64, -1)")], "learner.hidden_sizes", "(64, -1)", "a non-empty tuple of integers >= 1", "hidden_sizes_negative_width"),
    # environments (env_spec makes one env before launch)
    (C, [("env.id", "NoSuchEnv-v0")], "env.id", "'NoSuchEnv-v0'", "a registered Gymnasium id with a Discrete action space (e.g. CartPole-v1, Acrobot-v1", "env_unknown_id"),
    (C, [("env.id", "MinAtar/Breakout-v1")], "env.id", "'MinAtar/Breakout-v1'", "name it in env.imports", "env_namespace_not_registered"),
    (C, [("env.imports", "no_such_envs")], "env.imports", "'no_such_envs'", "a module importable in every process of the program", "env_import_missing"),
    (C, [("env.kwargs", "{'pole_length': 2}")], "env.kwargs", "{'pole_length': 2}", "keyword arguments CartPole-v1 takes", "env_kwargs_unknown"),
    (C, [("env.kwargs", "wind")], "env.kwargs", "'wind'", "a dict literal", "env_kwargs_not_a_dict"),
    (C, [("env.frame_stack", "4")], "env.frame_stack", "4", "1 (the default): it applies only with env.preprocessing='atari'", "env_atari_field_on_cartpole"),
    (C, [("env.id", "CliffWalking-v1"), ("stop.when_solved", "true")], "stop.when_solved", "True", "False: evaluation.target_return='auto' finds no reward_threshold", "env_when_solved_without_target"),
    (C, [("env.id", "Blackjack-v1"), ("learner.torso", "conv")], "learner.torso", "'conv'", "'mlp' for observation shape (45,)", "env_conv_torso_on_a_vector"),
    (C, [("env.id", "ALE/Pong-v5"), ("learner.torso", "conv"), ("learner.conv_layers", "((32, 8, 4), (64, 4, 2), (64, 3, 1), (64, 32, 1))")], "learner.conv_layers", "((32, 8, 4), (64, 4, 2), (64, 3, 1), (64, 32, 1))", "layer 4 (64, 32, 1) needs at least 32x32 input, gets 22x16", "env_conv_layers_do_not_fit"),
    (C, [("env.id", "Pendulum-v1")], "env.id", "'Pendulum-v1'", "a Discrete action space for a DQN agent, not Box(", "env_continuous_actions"),
    (C, [("env.id", "")], "env.id", "''", "a Gymnasium id such as 'CartPole-v1'", "env_empty_id"),
    (C, [("env.preprocessing", "atari")], "env.id", "'CartPole-v1'", "an ALE id such as 'ALE/Pong-v5' with preprocessing='atari'", "env_atari_preprocessing_on_cartpole"),
    (C, [("env.observation_indices", "(0, 9)")], "env.observation_indices", "(0, 9)", "each in [0, 3]", "env_observation_index_out_of_range"),
    # env.vectorization (apex.vector_envs.check_vectorization, after the env is made)
    (C, [("env.vectorization", "threads")], "env.vectorization", "'threads'", "one of ['auto', 'python', 'gymnasium', 'gymnasium_sync', 'gymnasium_async', 'ale', 'envpool']", "vectorization_unknown"),
    (C, [("env.vectorization", "ale")], "env.vectorization", "'ale'", "'ale' only for an ALE id with env.preprocessing='atari'", "vectorization_ale_on_cartpole"),
    (C, [("env.id", "Acrobot-v1"), ("env.vectorization", "gymnasium")], "env.vectorization", "'gymnasium'", "'gymnasium' only for an env with a vector entry point", "vectorization_gymnasium_without_vector_form"),
    (A, [("env.vectorization", "ale"), ("env.kwargs", "{'mode': 1}")], "env.vectorization", "'ale'", "'python' for env.kwargs ['mode']", "vectorization_ale_with_unmapped_kwargs"),
    (C, [("env.vectorization", "envpool")], "env.vectorization", "'envpool'", "an installed EnvPool (pip install envpool", "vectorization_envpool_missing"),
    # actor.overlap (apex.vector_halves.check_overlap)
    (C, [("actor.overlap", "true")], "actor.overlap", "True", "False with env.vectorization's 'gymnasium': only ['ale', 'gymnasium_async'] step outside Python", "overlap_without_a_mode_that_steps_apart"),
    (C, [("actor.overlap", "true"), ("actor.envs_per_actor", "1"), ("env.vectorization", "gymnasium_async")], "actor.overlap", "True", "False with actor.envs_per_actor=1 (two halves)", "overlap_with_one_env"),
    (R2D2, [("actor.overlap", "true"), ("env.vectorization", "gymnasium_async")], "actor.overlap", "True", "False for agent 'r2d2' (the overlapped loop is Ape-X DQN's)", "overlap_for_r2d2"),
    # central inference and the model store
    (C, [("actor.inference", "gpu")], "actor.inference", "'gpu'", "one of ['local', 'central']", "inference_mode_unknown"),
    (C, [("inference.max_batch", "8")], "inference.max_batch", "8", "at least actor.envs_per_actor (16): one actor's request of 16 observations is never split", "inference_batch_below_a_request"),
    (C, [("inference.max_wait_ms", "5000")], "inference.max_wait_ms", "5000.0", "a number of milliseconds in [0, 1000]", "inference_wait_too_long"),
    (C, [("model_store.keep_last", "0")], "model_store.keep_last", "0", "an integer >= 1", "model_store_keep_zero"),
    (C, [("evaluation.weights", "ema")], "evaluation.weights", "'ema'", "one of ['online', 'average']", "evaluation_weights_unknown"),
    (C, [("evaluation.weights", "average"), ("evaluation.average_decay", "1.0")], "evaluation.average_decay", "1.0", "a number in (0, 1), e.g. 0.999", "average_decay_one"),
    (C, [("evaluation.weights", "average"), ("model_store.enabled", "true")], "evaluation.weights", "'average'", "'online' with model_store.enabled=True (the store serves and keeps the online weights); 'average' needs model_store.enabled=False", "average_with_model_store"),
    # rate-limit planner
    (C, [("stop.max_actor_steps", "500")], "replay.min_size", "1000", "at most the 500 items that stop.max_actor_steps=500 env steps can insert", "planner_min_size_unreachable"),
    (R2D2, [("stop.max_actor_steps", "1000")], "replay.min_size", "200", "at most the 100 items that stop.max_actor_steps=1,000 env steps can insert", "planner_r2d2_min_size_unreachable"),
    (C, [("checkpoint.keep", "0")], "checkpoint.keep", "0", "an integer >= 1", "checkpoint_keep_zero"),
    (C, [("checkpoint.max_program_restarts", "-1")], "checkpoint.max_program_restarts", "-1", "an integer >= 0", "max_program_restarts_negative"),
    (C, [("checkpoint.crash_loop_seconds", "-5")], "checkpoint.crash_loop_seconds", "-5.0", "a number >= 0", "crash_loop_seconds_negative"),
    (C, [("checkpoint.period_seconds", "0")], "checkpoint.period_seconds", "0.0", "None or a number > 0", "checkpoint_period_zero"),
    # ports
    (C, [("replay.port", "70000")], "replay.port", "70000", "None or a port in [1, 65535]", "replay_port_above_65535"),
    (C, [("replay.port", "0")], "replay.port", "0", "None or a port in [1, 65535]", "replay_port_zero"),
]  # fmt: skip


@pytest.mark.parametrize(
    "config_file,overrides,field,shown,valid",
    [pytest.param(*case[:-1], id=case[-1]) for case in LOAD_CASES],
)
def test_bad_config_value_or_override(config_file, overrides, field, shown, valid):
    from launch.train import load_config

    with pytest.raises(ConfigError) as err:
        load_config(config_file, overrides)
    _message_names(err.value, field, shown, valid)


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    "argv,field,shown",
    [
        pytest.param(
            ["--config.actor.num_actors"],
            "config.actor.num_actors",
            "'--config.actor.num_actors'",
            id="override_without_equals",
        ),
        pytest.param(
            ["--config.actor.num_actors", "4"],
            "config.actor.num_actors",
            "'--config.actor.num_actors'",
            id="override_value_after_a_space",
        ),
    ],
)
def test_override_syntax(argv, field, shown, monkeypatch):
    from launch import train

    monkeypatch.setattr(train, "_OVERRIDES", [])
    with pytest.raises(ConfigError) as err:
        train.parse_argv(["launch.train", "--config=" + CARTPOLE, *argv])
    _message_names(err.value, field, shown, "the form --config.<section>.<field>=<value>")


@pytest.mark.parametrize("flag", [pytest.param("--config", id="no_config_flag")])
def test_missing_flag(flag, monkeypatch):
    """main() refuses before anything is made."""
    from absl import logging as absl_logging
    from absl.testing import flagsaver

    from launch import train

    verbosity = absl_logging.get_verbosity()
    try:
        with flagsaver.flagsaver(config=None), pytest.raises(ConfigError) as err:
            train.main(["launch.train"])
    finally:
        absl_logging.set_verbosity(verbosity)
    _message_names(err.value, flag, "None", "a config file, e.g. --config=configs/apex_cartpole.py")


@pytest.mark.parametrize(
    "argv,fragment",
    [
        pytest.param(
            ["--lp_launch_type=bogus"],
            "--lp_launch_type='bogus' is invalid: expected one of local_mp, local_mt",
            id="bad_launch_type_flag",
        ),
        pytest.param(
            ["--no_such_flag=1"], "Unknown command line flag 'no_such_flag'", id="unknown_flag"
        ),
    ],
)
def test_bad_absl_flag_is_one_line_and_exit_2(argv, fragment, monkeypatch, capsys):
    from absl import flags

    from launch import train

    monkeypatch.setattr(train, "_OVERRIDES", [])
    try:
        with pytest.raises(SystemExit) as done:
            train.parse_flags(["launch.train", "--config=" + CARTPOLE, *argv])
    finally:  # a failed parse leaves absl's flags half-set: back to the defaults
        flags.FLAGS.unparse_flags()
        flags.FLAGS.mark_as_parsed()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("apex: ") and fragment in err and "Traceback" not in err, err


# --------------------------------------------------------------------------- config files


@pytest.mark.parametrize(
    "name,content,valid",
    [
        pytest.param(
            "nope.py",
            None,
            "the path of an existing config file such as configs/apex_cartpole.py",
            id="config_file_missing",
        ),
        pytest.param(
            "",
            None,
            "the path of an existing config file such as configs/apex_cartpole.py",
            id="config_file_is_a_directory",
        ),
        pytest.param(
            "noget.py",
            "X = 1\n",
            "a file that defines get_config()",
            id="config_file_without_get_config",
        ),
        pytest.param(
            "boom.py",
            "def get_config():\n    raise RuntimeError('boom')\n",
            "a file whose get_config() runs (RuntimeError: boom)",
            id="config_file_get_config_raises",
        ),
        pytest.param(
            "syntax.py",
            "def get_config(:\n",
            "a config file that imports (SyntaxError: ",
            id="config_file_syntax_error",
        ),
        pytest.param(
            "dict.py",
            "def get_config():\n    return {}\n",
            "a file whose get_config() returns an apex.config.ApexConfig, not dict",
            id="config_file_returns_a_dict",
        ),
        pytest.param(
            "README.md",
            "# not python\n",
            "a Python file (.py) that defines get_config()",
            id="config_file_not_python",
        ),
    ],
)
def test_bad_config_file(name, content, valid, tmp_path):
    from launch.train import load_config

    path = str(tmp_path / name) if name else str(tmp_path)
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(ConfigError) as err:
        load_config(path, [])
    _message_names(err.value, "--config", repr(path), valid)


# --------------------------------------------------------------------------- run directory


@pytest.mark.parametrize(
    "sub",
    [
        pytest.param("afile/run", id="run_dir_under_a_file"),
        pytest.param("afile", id="run_dir_is_a_file"),
    ],
)
def test_unwritable_run_dir(sub, tmp_path):
    from apex.run_dir import prepare_run_dir

    (tmp_path / "afile").write_text("not a directory\n")
    path = str(tmp_path / sub)
    with pytest.raises(ConfigError) as err:
        prepare_run_dir(path, ApexConfig())
    _message_names(
        err.value,
        "run_dir",
        repr(path),
        "a directory that can be created and written (Not a directory)",
    )


# --------------------------------------------------------------------------- ports


@pytest.mark.parametrize("field", [pytest.param("replay.port", id="replay_port_taken")])
def test_port_taken(field):
    """make_program runs this check before it builds anything."""
    from apex.ports import check_port_free

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            check_port_free(field, port)
    _message_names(err.value, field, str(port), "a free port; it is in use by another process")


# --------------------------------------------------------------------------- tools.status


@pytest.mark.parametrize(
    "setup,code,fragment",
    [
        pytest.param(
            lambda d: str(d),
            2,
            "is not an apex run directory (it has none of config.json, heartbeats, replay_address)",
            id="status_not_a_run_dir",
        ),
        pytest.param(
            lambda d: str(d / "missing"), 2, "is not a directory", id="status_missing_dir"
        ),
        pytest.param(
            lambda d: None, 2, "usage: python -m tools.status RUN_DIR", id="status_no_run_dir"
        ),
    ],
)
def test_tools_status(setup, code, fragment, tmp_path, capsys):
    from tools.status import main

    run_dir = setup(tmp_path)
    argv = ["tools.status"] + ([run_dir] if run_dir else [])
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err, err
    if run_dir:
        assert err.startswith(f"tools.status: {run_dir} ")


# --------------------------------------------------------------------------- tools.replay
#
# Each case: tools.replay.main under absl's app.run, in one helper process,
# with the flags reset to their defaults in between.


def _write_checkpoint(root: str) -> str:
    """A real, complete Reverb checkpoint of one table 't' with 5 items; its directory."""
    import numpy as np
    import reverb

    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    server = reverb.Server(
        [table], checkpointer=reverb.checkpointers.DefaultCheckpointer(path=root)
    )
    try:
        client = reverb.Client(f"localhost:{server.port}")
        for i in range(5):
            client.insert(np.float32(i), priorities={"t": 1.0})
        return client.checkpoint()
    finally:
        server.stop()


# (id, argv with {placeholders}, exit code, fragment of the one stderr line)
REPLAY_CASES = [
    ("replay_unknown_command", ["bogus"], 2, "usage: python -m tools.replay {{stats|priorities|items|breakdown|watch}}"),
    ("replay_no_source", ["stats"], 2, "tools.replay: give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR"),
    ("replay_address_port_out_of_range", ["stats", "--server=localhost:99999"], 2, "tools.replay: the Reverb address 'localhost:99999' is not HOST:PORT with a port in [1, 65535]"),
    ("replay_address_without_port", ["stats", "--server=localhost"], 2, "tools.replay: the Reverb address 'localhost' is not HOST:PORT with a port in [1, 65535]"),
    ("replay_run_dir_without_address", ["stats", "--run_dir={empty}"], 1, "tools.replay: {empty}/replay_address does not exist (the program is not running); and {empty} has no complete checkpoint to read instead"),
    ("replay_run_dir_of_a_stopped_run", ["stats", "--run_dir={stopped}", "--timeout=30"], 1, "tools.replay: cannot reach the Reverb server localhost:1: Connection refused (is the program running?)"),
    ("replay_checkpoint_missing", ["stats", "--checkpoint={empty}/missing"], 2, "tools.replay: '{empty}/missing' is not a directory"),
    ("replay_checkpoint_not_a_checkpoint", ["priorities", "--checkpoint={empty}"], 2, "tools.replay: no complete Reverb checkpoint in '{empty}'"),
    ("replay_checkpoint_half_written", ["stats", "--checkpoint={half}"], 2, "tools.replay: '{half}' has no DONE marker: a half-written checkpoint is never read"),
    ("replay_checkpoint_corrupt", ["stats", "--checkpoint={corrupt}"], 2, "tools.replay: cannot read the checkpoint: {corrupt}/tables.tfrecord: bad length checksum at 0"),
    ("replay_checkpoint_corrupt_items", ["items", "--checkpoint={corrupt}"], 2, "tools.replay: cannot read the checkpoint: {corrupt}/tables.tfrecord: bad length checksum at 0"),
    ("replay_checkpoint_without_tables", ["stats", "--checkpoint={no_tables}"], 2, "tools.replay: the checkpoint {no_tables} holds no tables"),
    ("replay_unknown_table", ["priorities", "--checkpoint={good}", "--table=nope"], 2, "tools.replay: --table='nope' is not in the checkpoint; tables: ['t']"),
    ("replay_watch_offline", ["watch", "--checkpoint={good}"], 2, "tools.replay: watch needs a live source (--run_dir or --server)"),
    ("replay_out_unwritable", ["items", "--checkpoint={good}", "--out={file}/items.npz"], 2, "tools.replay: {file}/items.npz: Not a directory"),
    ("replay_png_unwritable", ["priorities", "--checkpoint={good}", "--png={file}/prio.png"], 2, "tools.replay: {file}/prio.png: Not a directory"),
    ("replay_bands_not_numbers", ["breakdown", "--checkpoint={good}", "--bands=low,high"], 2, "tools.replay: --bands=low,high is invalid: expected numbers, e.g. --bands=0.01,0.1"),
    ("replay_bins_zero", ["priorities", "--checkpoint={good}", "--bins=0"], 1, "FATAL Flags parsing error: flag --bins=0: 0 is not a positive integer"),
]  # fmt: skip


@pytest.fixture(scope="module")
def replay_results(tmp_path_factory):
    """Runs every REPLAY_CASES case through tools.replay.main in one helper process."""
    d = tmp_path_factory.mktemp("replay_inputs")
    paths = {k: d / k for k in ("empty", "stopped", "half", "corrupt", "no_tables")}
    for p in paths.values():
        p.mkdir()
    (paths["stopped"] / "replay_address").write_text("localhost:1\n")  # nothing listens there
    (paths["half"] / "tables.tfrecord").write_bytes(b"")  # no DONE marker
    good = _write_checkpoint(str(d / "ckpt"))
    for name in ("corrupt", "no_tables"):
        shutil.copytree(good, paths[name], dirs_exist_ok=True)
    (paths["corrupt"] / "tables.tfrecord").write_bytes(bytes(range(256)))  # garbage
    (paths["no_tables"] / "tables.tfrecord").write_bytes(b"")  # complete, but empty
    (d / "afile").write_text("not a directory\n")
    names = {**{k: str(p) for k, p in paths.items()}, "good": good, "file": str(d / "afile")}
    cases = [(cid, [a.format(**names) for a in argv]) for cid, argv, _, _ in REPLAY_CASES]
    ran = run_tool_lines("tools.replay", [argv for _, argv in cases], timeout=120)
    return {cid: r for (cid, _), r in zip(cases, ran)}, names


@pytest.mark.cli  # the cases run in one tools.replay process
@pytest.mark.parametrize(
    "case_id,code,fragment",
    [pytest.param(cid, code, frag, id=cid) for cid, _, code, frag in REPLAY_CASES],
)
def test_tools_replay(case_id, code, fragment, replay_results):
    results, names = replay_results
    r = results[case_id]
    err = r["stderr"]
    assert "Traceback" not in err, err
    assert r["rc"] == code, err
    assert fragment.format(**names) in err, err
    assert err.splitlines()[0].startswith(("tools.replay: ", "usage: ", "FATAL Flags")), err


# --------------------------------------------------------------------------- entry points


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )


@pytest.mark.cli
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "override", [pytest.param("--config.replay.capacity=-5", id="entry_point_invalid_config")]
)
def test_entry_point_invalid_config_exits_2(override):
    """No traceback, nothing launched, no run directory."""
    proc = _run("launch.train", "--config=configs/apex_cartpole.py", override)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "apex: invalid configuration: replay.capacity=-5 is invalid: expected an integer >= 1"
    ), proc.stderr[-2000:]
    assert "[apex] launching" not in proc.stdout and "[apex] run_dir" not in proc.stdout


@pytest.mark.cli
@pytest.mark.timeout(120)
@pytest.mark.parametrize("launch_type", ["local_docker", "vertex_ai", "test_mp", "test_mt"])
def test_launch_types_apex_does_not_support_are_refused_before_anything(launch_type, tmp_path):
    """Launchpad's flag offers them; each crashed after creating a run directory."""
    run_dir = tmp_path / "run"
    proc = _run(
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--lp_launch_type={launch_type}",
        f"--config.run_dir={run_dir}",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        f"apex: invalid configuration: --lp_launch_type='{launch_type}' is invalid: "
        "expected one of local_mp, local_mt (apex supports these launch types)"
    ), proc.stderr[-2000:]
    assert not run_dir.exists()


@pytest.mark.cli
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "server", [pytest.param("--server=localhost:1", id="replay_server_unreachable")]
)
def test_entry_point_replay_server_unreachable_fails_fast(server):
    """Nothing listens on localhost:1: one line at once, not after --timeout (300 s
    here, past the subprocess's 110 s hang guard: waiting it out fails the test)."""
    proc = _run("tools.replay", "stats", server, "--timeout=300")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "tools.replay: cannot reach the Reverb server localhost:1: Connection refused "
        "(is the program running?)"
    ), proc.stderr[-2000:]


# --------------------------------------------------------------------------- the doc


def test_doc_table_and_cases_agree():
    """Every case here has a row in docs/bad_inputs.md, and every row's test id is a
    quoted case id in some test file."""
    with open(os.path.join(ROOT, "docs", "bad_inputs.md")) as f:
        rows = re.findall(r"^\| \d+ \|.*\| `(\w+)` \|$", f.read(), re.M)
    with open(__file__) as f:
        here = set(re.findall(r'id="(\w+)"', f.read()))
    here |= {case[-1] for case in LOAD_CASES} | {case[0] for case in REPLAY_CASES}
    sources = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "*.py"))):
        with open(path) as f:
            sources += f.read()
    assert len(rows) == len(set(rows)), "a test id appears in two rows"
    assert here - set(rows) == set(), "cases without a row in docs/bad_inputs.md"
    assert {r for r in rows if f'"{r}"' not in sources} == set(), "rows without a test"
    assert len(rows) >= 25


# --------------------------------------------------------------------------- resume


def _saved_run(run_dir: str, config: ApexConfig) -> str:
    """A run dir holding a complete checkpoint of `config` (tiny, no server needed)."""
    import numpy as np

    from apex import checkpointing
    from apex.agents import item_signature, make_network
    from apex.envs import env_spec

    spec = env_spec(config.env)
    shapes = [list(w.shape) for w in make_network(config, spec, seed=0).weights]
    manifest = checkpointing.make_manifest(config, item_signature(config, spec), shapes)
    replay = os.path.join(run_dir, "r")
    os.makedirs(replay)
    open(os.path.join(replay, "DONE"), "w").close()
    open(os.path.join(run_dir, "config.json"), "w").close()
    return checkpointing.write(run_dir, 7, {"steps": np.asarray(7)}, {}, manifest, replay, 2)


def _resume_case(kind: str, d: str):
    """(config to resume with, require) after preparing `d` for case `kind`."""
    from apex import checkpointing

    c = ApexConfig()
    if kind == "empty":
        return c, True
    if kind == "partial_only":
        open(os.path.join(d, "config.json"), "w").close()
        os.makedirs(os.path.join(checkpointing.checkpoints_dir(d), "ckpt-000000003.partial"))
        return c, False
    path = _saved_run(d, ApexConfig())
    if kind == "corrupt":
        with open(os.path.join(path, checkpointing.LEARNER_FILE), "wb") as f:
            f.write(b"garbage")
    elif kind == "capacity":
        c.replay.capacity = 5000
    elif kind == "network":
        c.learner.hidden_sizes = (64,)
    return c, False


@pytest.mark.parametrize(
    "kind,error,fragment",
    [
        pytest.param("empty", ConfigError, "it holds no run", id="resume_without_a_run"),
        pytest.param(
            "partial_only",
            ConfigError,
            "it holds a run with no complete checkpoint (only half-written ones, ignored: "
            "ckpt-000000003.partial)",
            id="resume_only_half_written_checkpoint",
        ),
        pytest.param(
            "corrupt",
            "CheckpointError",
            "has no sound complete checkpoint left to resume from (set aside: "
            "ckpt-000000007.damaged)",
            id="resume_corrupt_checkpoint",
        ),
        pytest.param(
            "capacity",
            "CheckpointError",
            "replay.capacity is 20000 in the checkpoint and 5000 now",
            id="resume_changed_table_setting",
        ),
        pytest.param(
            "network",
            "CheckpointError",
            "learner.hidden_sizes is (128, 128) in the checkpoint and (64,) now",
            id="resume_changed_network",
        ),
    ],
)
def test_resume_refusals(kind, error, fragment, tmp_path):
    from apex.checkpointing import CheckpointError
    from launch.resume import resume_checkpoint

    expected = CheckpointError if error == "CheckpointError" else error
    config, require = _resume_case(kind, str(tmp_path))
    with pytest.raises(expected) as err:
        resume_checkpoint(config, str(tmp_path), require=require)
    assert fragment in str(err.value), str(err.value)
    if kind == "corrupt":  # set aside, not deleted: a person may look at it
        assert os.path.isdir(os.path.join(str(tmp_path), "checkpoints", "ckpt-000000007.damaged"))
    if expected is ConfigError:
        assert err.value.field == "run_dir"
