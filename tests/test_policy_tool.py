"""Trained-policy export and use: apex.trained_policy and `python -m tools.policy`.

The run directory of most tests is made in this process, without a program: a
real Learner (its state is what a run checkpoint holds), a real Evaluator
writing the run's evaluator metrics and offering the learner its best
parameters, and apex.checkpointing.write. One integration test exports from a
real training run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from apex import checkpointing
from apex import trained_policy as tp
from tests.procs import ROOT

SEED = 10_000_000  # the evaluator's first seed with config.seed = 0


def _small_config():
    from apex.config import ApexConfig

    c = ApexConfig()
    c.actor.num_actors = 1
    c.actor.envs_per_actor = 4
    c.replay.capacity = 5_000
    c.replay.min_size = 64
    c.replay.error_buffer = 1e7
    c.learner.batch_size = 32
    c.learner.hidden_sizes = (16, 16)
    c.evaluation.episodes = 3
    c.logging.progress_period_seconds = 0
    c.logging.tensorboard = False
    return c


def _pole_weights(w: tuple[float, ...], width: int = 16) -> list[np.ndarray]:
    """MLP weights (4 -> 16 -> 16 -> 2) whose greedy action is 1 iff w . obs > 0."""
    w0 = np.zeros((4, width), np.float32)
    w0[:, 0], w0[:, 1] = w, -np.asarray(w)
    w1 = np.zeros((width, width), np.float32)
    w1[0, 0] = w1[1, 1] = 1.0
    head = np.zeros((width, 2), np.float32)
    head[0, 1] = head[1, 0] = 1.0
    zeros = [np.zeros(width, np.float32), np.zeros(width, np.float32), np.zeros(2, np.float32)]
    return [w0, zeros[0], w1, zeros[1], head, zeros[2]]


def _random_weights(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 0.5, s).astype(np.float32) for s in shapes]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run dir with evaluations of versions 3 (random weights), 7 (a pole
    heuristic: the best) and 12 (always left), a checkpoint at step 12, then
    online weights of version 15 (never evaluated) and a checkpoint at 15."""
    import reverb

    from apex.agents import make_tables
    from apex.envs import env_spec
    from apex.evaluation import Evaluator
    from apex.learner import Learner
    from apex.metrics import MetricsWriter
    from apex.run_dir import prepare_run_dir

    c = _small_config()
    spec = env_spec(c.env)
    root = tmp_path_factory.mktemp("policy_run")
    run_dir = prepare_run_dir(str(root / "run"), c)
    server = reverb.Server(make_tables(c, spec))
    learner = Learner(c, spec, f"localhost:{server.port}")
    metrics = MetricsWriter(run_dir, "evaluator", "evaluator/evaluations", tensorboard=False)
    evaluator = Evaluator(c, learner, metrics=metrics, best_sink=learner)
    manifest = checkpointing.make_manifest(c, learner.signature, learner.network_shapes())
    shapes = [tuple(s) for s in learner.network_shapes()]

    def set_online(weights, steps):
        for v, w in zip(learner._online.weights, weights):
            v.assign(w)
        learner.steps = steps

    def checkpoint(step):
        replay = os.path.join(str(root), f"replay{step}")
        os.makedirs(replay)
        open(os.path.join(replay, "DONE"), "w").close()
        return checkpointing.write(
            run_dir, step, learner.get_state(), {"learner_steps": step}, manifest, replay, keep=5
        )

    weights = {
        3: _random_weights(shapes, 1),
        7: _pole_weights((0.0, 0.0, 0.0, 1.0)),
        12: [np.zeros(s, np.float32) for s in shapes],
        15: _random_weights(shapes, 2),
    }
    rows = {}
    try:
        for version in (3, 7, 12):
            set_online(weights[version], version)
            rows[version] = evaluator.evaluate_once()
        ckpt12 = checkpoint(12)
        set_online(weights[15], 15)
        ckpt15 = checkpoint(15)
    finally:
        metrics.close()
        learner.close()
        server.stop()
    return {
        "config": c,
        "run_dir": run_dir,
        "ckpt12": ckpt12,
        "ckpt15": ckpt15,
        "weights": weights,
        "rows": rows,
        "root": root,
    }


def _npz(folder):
    with np.load(os.path.join(folder, "weights.npz")) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _meta(folder):
    with open(os.path.join(folder, "policy.json")) as f:
        return json.load(f)


def _tool(capsys, *argv):
    """tools.policy.run in this process: (exit code, stdout, stderr)."""
    from tools.policy import run as run_tool

    code = run_tool(["tools.policy", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _returns(stdout):
    return [float(r) for r in re.findall(r"^episode \d+ \(seed \d+\): return (\S+)$", stdout, re.M)]


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    """The run's best policy, its latest (version 15) and checkpoint 12's latest."""
    d = tmp_path_factory.mktemp("exported")
    return {
        "best": (str(d / "best"), tp.export(run["run_dir"], str(d / "best"), "best")),
        "latest": (str(d / "latest"), tp.export(run["run_dir"], str(d / "latest"), "latest")),
        "latest12": (str(d / "l12"), tp.export(run["ckpt12"], str(d / "l12"), "latest")),
    }


# ---------------------------------------------------------------------- export


def test_best_exports_the_best_evaluated_weights_and_latest_the_online_ones(run, exported):
    state = checkpointing.load(run["ckpt15"]).learner
    n = len(run["weights"][7])
    best_dir, best = exported["best"]
    # The pole heuristic (version 7) evaluated best: the checkpoint keeps it.
    assert int(state["best_version"]) == 7 == best["version"]
    assert best["eval_return"] == float(state["best_return_mean"])
    assert best["eval_return"] == run["rows"][7]["evaluator/return_mean"]
    for i, w in enumerate(_npz(best_dir)):
        np.testing.assert_array_equal(w, state[f"best/{i}"])
        np.testing.assert_array_equal(w, run["weights"][7][i])
    assert len(_npz(best_dir)) == n
    # The evaluation it had: the evaluator's second (k = 1), 3 episodes.
    assert best["evaluation"]["seed"] == SEED + 1000 and best["evaluation"]["episodes"] == 3

    latest_dir, latest = exported["latest"]
    assert latest["version"] == 15 and latest["eval_return"] is None
    for i, w in enumerate(_npz(latest_dir)):
        np.testing.assert_array_equal(w, state[f"online/{i}"])
        np.testing.assert_array_equal(w, run["weights"][15][i])

    l12_dir, l12 = exported["latest12"]  # a checkpoint given directly; its version evaluated
    assert l12["version"] == 12 and l12["source"]["checkpoint"] == run["ckpt12"]
    assert l12["eval_return"] == run["rows"][12]["evaluator/return_mean"]
    assert l12["evaluation"]["seed"] == SEED + 2000
    for w in _npz(l12_dir):
        assert not w.any()

    meta = _meta(best_dir)
    assert meta["format"] == tp.FORMAT and meta["agent"] == "apex_dqn"
    assert meta["env_id"] == "CartPole-v1" and meta["env_kwargs"] == {}
    assert meta["config"]["learner"]["hidden_sizes"] == [16, 16]
    assert meta["observation"] == {
        "shape": [4],
        "dtype": "float32",
        "num_actions": 2,
        "scale": 1.0,
    }
    assert meta["source"]["run_dir"] == run["run_dir"]
    assert meta["source"]["checkpoint"] == run["ckpt15"]


def test_export_cli_prints_the_version_and_refuses_a_second_export_over_it(run, tmp_path, capsys):
    out = str(tmp_path / "p")
    code, stdout, err = _tool(capsys, "export", run["run_dir"], f"--out={out}")
    assert code == 0, err
    assert "version 7, evaluation return" in stdout and stdout.splitlines()[-1] == out
    code, _, err = _tool(capsys, "export", run["run_dir"], f"--out={out}", "--which=latest")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "exists and is not empty (a policy folder: --force, or overwrite=True, replaces it)" in err
    )
    code, _, err = _tool(
        capsys, "export", run["run_dir"], f"--out={out}", "--which=latest", "--force"
    )
    assert code == 0, err
    assert _meta(out)["version"] == 15


def test_a_checkpoint_without_best_parameters_names_which_latest(run, tmp_path, capsys):
    src = checkpointing.load(run["ckpt12"])
    learner = {k: v for k, v in src.learner.items() if not k.startswith("best")}
    replay = str(tmp_path / "replay")
    os.makedirs(replay)
    open(os.path.join(replay, "DONE"), "w").close()
    run_dir = str(tmp_path / "run")
    checkpointing.write(run_dir, 12, learner, src.state, src.manifest, replay, keep=2)
    code, _, err = _tool(capsys, "export", run_dir, f"--out={tmp_path / 'p'}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "keeps no best evaluated parameters" in err and "--which=latest" in err
    assert tp.export(run_dir, str(tmp_path / "p"), "latest")["version"] == 12


# ------------------------------------------------------------------------ play


@pytest.mark.parametrize("which", ["best", "latest12"])
def test_play_reproduces_the_evaluation_recorded_for_that_version(run, exported, which, capsys):
    from apex.agents import make_policy
    from apex.envs import env_spec
    from apex.evaluation import evaluate

    folder, meta = exported[which]
    seed = meta["evaluation"]["seed"]
    # Default seed: the recorded evaluation's; its episode count: its mean.
    code, stdout, err = _tool(capsys, "play", folder, "--episodes=3")
    assert code == 0, err
    played = _returns(stdout)
    assert len(played) == 3 and f"(seeds {seed}..{seed + 2})" in stdout
    assert np.mean(played) == meta["eval_return"]
    # The evaluator's own function on the exported weights, same seed: the same returns.
    c = run["config"]
    policy = make_policy(c, env_spec(c.env))
    policy.set_weights(_npz(folder))
    assert played == evaluate(c, policy, 3, 0.0, seed=seed).tolist()
    # Another seed, given: the evaluator's returns for that seed.
    code, stdout, _ = _tool(capsys, "play", folder, "--episodes=2", "--seed=5")
    assert code == 0 and _returns(stdout) == evaluate(c, policy, 2, 0.0, seed=5).tolist()


@pytest.mark.slow
def test_gif_records_the_same_episodes(exported, tmp_path, capsys):
    pytest.importorskip("PIL")
    from PIL import Image

    folder, meta = exported["best"]
    gif = str(tmp_path / "play.gif")
    code, stdout, err = _tool(capsys, "play", folder, "--episodes=2", f"--gif={gif}")
    assert code == 0, err
    assert os.path.getsize(gif) > 0 and f"recorded: {gif}" in stdout
    played = _returns(stdout)
    assert played == tp.load(folder).evaluate(2).tolist()  # rendering changed nothing
    with Image.open(gif) as image:  # reset + every step of both episodes, 20 ms each
        durations = []  # (Pillow merges identical frames, adding up their durations)
        for i in range(image.n_frames):
            image.seek(i)
            durations.append(image.info["duration"])
        assert image.n_frames > 100 and sum(durations) == 20 * (int(sum(played)) + 2)


def test_gif_keeps_at_most_its_frame_cap_and_says_so(exported, tmp_path, capsys, monkeypatch):
    pytest.importorskip("PIL")
    from PIL import Image

    import tools.policy

    monkeypatch.setattr(tools.policy, "GIF_MAX_FRAMES", 5)
    gif = str(tmp_path / "short.gif")
    code, stdout, err = _tool(
        capsys, "play", exported["latest12"][0], "--episodes=2", f"--gif={gif}"
    )
    assert code == 0, err
    left_out = int(sum(_returns(stdout))) + 2 - 5
    assert f"the GIF holds the first 5 frames; {left_out} later ones are left out" in err
    with Image.open(gif) as image:
        durations = []
        for i in range(image.n_frames):
            image.seek(i)
            durations.append(image.info["duration"])
        assert sum(durations) == 5 * 20


def test_video_without_moviepy_is_one_line(exported, tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("moviepy") is not None:
        pytest.skip("moviepy is installed")
    code, _, err = _tool(capsys, "play", exported["best"][0], f"--video={tmp_path / 'a.mp4'}")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--video needs moviepy" in err


_FAKE_MOVIEPY = """
class ImageSequenceClip:
    def __init__(self, frames, fps):
        self.frames, self.fps = list(frames), fps

    def write_videofile(self, path, logger=None):
        with open(path, "w") as f:
            f.write(f"{len(self.frames)} frames at {self.fps} fps")
"""


def test_video_goes_through_gymnasium_record_video(exported, tmp_path, capsys, monkeypatch):
    """With a stand-in for moviepy's ImageSequenceClip: one file per episode."""
    fake = tmp_path / "fake"
    (fake / "moviepy" / "video" / "io").mkdir(parents=True)
    for sub in ("moviepy", "moviepy/video", "moviepy/video/io"):
        (fake / sub / "__init__.py").write_text("")
    (fake / "moviepy" / "video" / "io" / "ImageSequenceClip.py").write_text(_FAKE_MOVIEPY)
    monkeypatch.syspath_prepend(str(fake))
    try:
        folder = exported["latest12"][0]
        video = str(tmp_path / "out.mp4")
        code, stdout, err = _tool(capsys, "play", folder, "--episodes=2", f"--video={video}")
        assert code == 0, err
        played = _returns(stdout)
        for i, r in enumerate(played):
            path = str(tmp_path / f"out-episode-{i}.mp4")
            assert f"recorded: {path}" in stdout
            with open(path) as f:
                assert f.read() == f"{int(r) + 1} frames at 50 fps"
        code, stdout, err = _tool(capsys, "play", folder, "--episodes=1", f"--video={video}")
        assert code == 0 and os.path.isfile(video), err
    finally:
        for name in [m for m in sys.modules if m == "moviepy" or m.startswith("moviepy.")]:
            del sys.modules[name]


# --------------------------------------------------------------------- library


def test_library_act_is_the_argmax_of_the_acting_policy(run, exported):
    import gymnasium as gym

    from apex.agents import make_policy
    from apex.envs import env_spec

    assert (tp.load(exported["latest"][0]).version, tp.load(exported["latest"][0]).eval_return) == (
        15,
        None,
    )
    folder, meta = exported["best"]  # the pole heuristic: both actions occur
    policy = tp.load(folder)
    assert (policy.version, policy.eval_return) == (7, meta["eval_return"])
    assert policy.env_id == "CartPole-v1"
    c = run["config"]
    reference = make_policy(c, env_spec(c.env))
    reference.set_weights(run["weights"][7])
    env, raw_env = policy.make_env(), gym.make("CartPole-v1")
    obs, _ = env.reset(seed=4)
    raw, _ = raw_env.reset(seed=4)
    actions = []
    for _ in range(60):
        q, _ = reference(obs[None].astype(np.float32))
        np.testing.assert_array_equal(policy.q_values(obs), q[0])
        a = policy.act(obs)
        assert a == int(np.argmax(q[0])) == policy.act(raw)  # the plain env's obs too
        actions.append(a)
        obs, _, term, trunc, _ = env.step(a)
        raw, *_ = raw_env.step(a)
        if term or trunc:
            obs, _ = env.reset()
            raw, _ = raw_env.reset()
    assert set(actions) == {0, 1}
    env.close()
    raw_env.close()


def test_recurrent_policy_keeps_its_state_and_encodes_raw_observations(tmp_path):
    """R2D2 on masked CartPole (observation_indices=(0, 2)): a raw 4-vector is
    encoded as the actors' env does, and act carries the LSTM state."""
    import gymnasium as gym

    from apex.agents import make_network, make_policy
    from apex.envs import env_spec

    c = _small_config()
    c.agent = "r2d2"
    c.env.observation_indices = (0, 2)
    c.r2d2.lstm_size = 8
    c.learner.hidden_sizes = (8,)
    spec = env_spec(c.env)
    shapes = [tuple(w.shape) for w in make_network(c, spec).weights]
    weights = _random_weights(shapes, 3)
    folder = str(tmp_path / "r2d2")
    tp.write_policy(folder, c, weights, version=42)
    policy = tp.load(folder)
    assert policy.recurrent and policy.version == 42 and policy.spec.observation_shape == (2,)
    reference = make_policy(c, spec)
    reference.set_weights(weights)
    env = gym.make("CartPole-v1")  # the plain env: 4 numbers
    raw, _ = env.reset(seed=1)
    state = reference.initial_state(1)
    first_q = None
    for step in range(30):
        obs = raw[[0, 2]].astype(np.float32)[None]
        q, state = reference(obs, state)
        first_q = q[0] if first_q is None else first_q
        np.testing.assert_allclose(policy.q_values(raw), q[0], rtol=1e-6)
        a = policy.act(raw)
        assert a == int(np.argmax(q[0])), step
        raw, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    policy.reset()  # a new episode starts from the zero state
    first, _ = env.reset(seed=1)
    np.testing.assert_allclose(policy.q_values(first[[0, 2]]), first_q, rtol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(2,\) .* or \(4,\) .* expected, not \(3,\)"):
        policy.act(np.zeros(3, np.float32))
    env.close()


# ---------------------------------------------------------------------- errors


def test_not_a_run_dir_and_not_a_policy_are_one_line_exit_2(run, tmp_path, capsys):
    empty = str(tmp_path)
    for argv, fragment in [
        (("export", empty, f"--out={tmp_path / 'p'}"), "is not an apex run directory"),
        (("export", str(tmp_path / "missing"), "--out=x"), "is not a directory"),
        (("play", empty), "is not a policy folder (no policy.json"),
        (("play", run["run_dir"]), "is not a policy folder"),
        (("export", run["run_dir"]), "the following arguments are required: --out"),
        (("export", run["run_dir"], "--out=x", "--which=worst"), "invalid choice: 'worst'"),
        (("bogus",), "usage: python -m tools.policy export RUN_DIR"),
    ]:
        code, _, err = _tool(capsys, *argv)
        assert code == 2, (argv, err)
        assert "Traceback" not in err, err
        if argv[0] != "bogus":
            assert len(err.strip().splitlines()) == 1 and err.startswith("tools.policy: "), err
        assert fragment in err, (argv, err)
    with pytest.raises(tp.PolicyError, match="not a policy folder"):
        tp.load(empty)


@pytest.mark.cli
@pytest.mark.timeout(120)
def test_cli_refusals_exit_2_with_one_line_and_no_traceback(tmp_path):
    for argv in (["export", str(tmp_path), f"--out={tmp_path / 'p'}"], ["play", str(tmp_path)]):
        out = subprocess.run(
            [sys.executable, "-m", "tools.policy", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=110,
        )
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert out.stderr.startswith(f"tools.policy: {tmp_path} is not ")


# A real run's export and play: tests/test_inference_program.py (its learning run,
# whose best parameters come from the model store through the checkpoint).
