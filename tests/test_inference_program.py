"""Central inference and the model store in real programs: a local_mp run with
actor.inference='central', model_store.enabled and two replay shards learns
CartPole within the default test's env-step budget; its replay (both shards)
holds right items with the server's versions; the store served the evaluator
and holds the best; the figures are documented and shown by tools.status and
tools.plot. And the inference node's
loop raises (so the node reports 'node failed') when its forward pass fails,
while no actor waiting on it hangs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from apex import checkpointing
from apex.inference import BatchingServer, ServerStopped, follow_learner
from tests.procs import ROOT


def _documented(component: str) -> set[str]:
    text = open(os.path.join(ROOT, "docs", "metrics.md")).read()
    return set(re.findall(rf"`({component}/[a-z0-9_]+)`", text))


def _tool(module: str, *args: str) -> subprocess.CompletedProcess:
    """Runs `python -m module args` to completion; asserts exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _rows(run_dir: str, component: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics", f"{component}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.integration
@pytest.mark.learning
@pytest.mark.timeout(600)
def test_central_inference_a_model_store_and_two_shards_learn_cartpole_within_the_budget(
    tmp_path,
):
    # One learning run for three roles (CI's time): central inference, the model
    # store and replay shards each learn as well as the default program, together.
    from apex.replay.tables import unpack_item
    from tests.procs import run_train, wait_until_gone
    from tests.replay_checks import assert_cartpole_nstep
    from tools.replay_inspect import checkpoint_reader as cr

    run_dir = str(tmp_path / "run")
    # The budget of the default run's test (tests/test_local_mp.py: CARTPOLE_BUDGET).
    out, s, token = run_train(
        run_dir,
        "--config.actor.inference=central",
        "--config.model_store.enabled=true",
        "--config.replay.num_shards=2",
        # Evaluations every 5 s, not 2: near the solve, 10 evaluation episodes of
        # CartPole cost about as much CPU as the actors (CI's two cores).
        "--config.evaluation.period_seconds=5",
        "--config.stop.when_solved=true",
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=600000",
        timeout=560,
    )
    wait_until_gone(token)
    print("central:", json.dumps({k: s.get(k) for k in sorted(s) if k != "eval_returns"}))
    assert s["stop_reason"] == "solved", s
    assert s["solved_at_env_steps"] is not None and s["solved_at_env_steps"] <= 600000, s

    # The server batched: every row's keys documented; both actors' requests met.
    inference = _rows(run_dir, "inference")
    assert inference and {k for r in inference for k in r} - {"time"} <= _documented("inference")
    assert max(r.get("inference/batch_requests_p90", 0) for r in inference) >= 2
    assert inference[-1]["inference/requests"] > 0
    # Actors acted on the server's versions, which moved with the learner.
    actor_rows = _rows(run_dir, "actor_0")
    assert actor_rows[-1]["actor/param_version"] > 0 and actor_rows[-1]["actor/param_updates"] > 1

    # The model store served the evaluator and keeps the best, as summary.json says.
    store = _rows(run_dir, "model_store")
    assert store and {k for r in store for k in r} - {"time"} <= _documented("model_store")
    last = store[-1]
    assert last["model_store/pushes"] > 1 and last["model_store/pulls"] > 0
    assert last["model_store/best_version"] == s["best_eval_version"]
    assert last["model_store/best_return"] == s["best_eval_return_mean"]
    final = checkpointing.load(checkpointing.latest_complete(run_dir))
    assert int(final.learner["best_version"]) == s["best_eval_version"]
    assert float(final.learner["best_return_mean"]) == s["best_eval_return_mean"]
    assert int(final.learner["store_version"]) <= int(final.learner["steps"])

    # Two shards: the launch line, the progress line and summary.json say so,
    # each shard's figures adding up to the totals.
    assert "[apex] replay: 2 shards (actor i writes to shard i % 2), each:" in out
    assert re.search(r"replay [\d,]+/20,000 \([\d,]+\+[\d,]+\)", out), out[-3000:]
    shards = s["replay_shards"]
    assert sorted(shards) == ["replay_0", "replay_1"]
    for key in ("size", "inserts", "samples"):
        assert all(shards[n][key] > 0 for n in shards), shards
        assert sum(shards[n][key] for n in shards) == s[f"replay_{key}"], (key, s)
    with open(os.path.join(run_dir, "replay_addresses")) as f:
        lines = f.read().splitlines()
    assert [ln.split(" ")[0] for ln in lines] == ["replay_0", "replay_1"]
    assert all(re.fullmatch(r"replay_\d \S+:\d+", ln) for ln in lines), lines
    with open(os.path.join(run_dir, "replay_address")) as f:
        assert f.read().strip() == lines[0].split(" ")[1]  # shard 0's, as tools read it
    shard_keys = {
        re.sub(r"shard_\d+", "shard_0", k) for r in _rows(run_dir, "coordinator") for k in r
    }
    shard_keys = {k for k in shard_keys if "shard_" in k}
    assert shard_keys and shard_keys <= _documented("replay/shard_0"), sorted(shard_keys)

    # The replay (the stop's checkpoint, both shards, each a whole Reverb
    # Reverb checkpoint): right n-step values, actor i in shard i % 2,
    # versions the learner had reached, most of them past the first.
    assert s["checkpoint"]["path"] == final.path
    assert sorted(n for n in os.listdir(final.path) if n.startswith("replay")) == [
        "replay_0",
        "replay_1",
    ]
    gamma, n = 0.99, 3
    versions = []
    for shard, path in enumerate(final.shard_paths):
        actors = set()
        for item in cr.iter_items(path, "transitions"):
            data = unpack_item(item.data)
            assert_cartpole_nstep(data, gamma, n)
            actors.add(int(data["actor"]))
            versions.append(int(data["version"]))
        assert actors == {shard}, (shard, actors)
    # Every item the replay held at the stop (the coordinator's last count, or
    # more), up to its capacity: a quick solve stops before the 20,000 fill.
    assert min(s["replay_size"], 20_000) <= len(versions) <= 20_000, (len(versions), s)
    assert max(versions) <= int(final.learner["steps"]) and np.median(versions) > 0

    # Export then play the best (the store's record, through the checkpoint):
    # `play` on its recorded seed reproduces the evaluation return of that version.
    from tests.test_policy_tool import _meta, _returns

    folder = str(tmp_path / "policy")
    _tool("tools.policy", "export", run_dir, f"--out={folder}")
    meta = _meta(folder)
    assert meta["source"]["checkpoint"] == final.path
    assert meta["version"] == s["best_eval_version"]
    assert meta["eval_return"] == s["best_eval_return_mean"]
    assert meta["evaluation"]["seed"] is not None and meta["evaluation"]["episodes"] == 10
    with open(os.path.join(run_dir, "versions.json")) as f:
        assert meta["git_commit"] == json.load(f)["git_commit"]
    played = _tool("tools.policy", "play", folder, "--episodes=10")
    assert np.mean(_returns(played.stdout)) == meta["eval_return"], played.stdout

    # tools.status and tools.plot show both roles.
    status = _tool("tools.status", run_dir)
    assert re.search(r"^inference: [\d,]+ requests/s", status.stdout, re.M), status.stdout
    assert f"best version {s['best_eval_version']:,}" in status.stdout, status.stdout
    _tool("tools.plot", run_dir)
    assert os.path.getsize(os.path.join(run_dir, "plots", "inference.png")) > 0


class _Learner:
    """The learner as the inference node sees it in-process: steps and get_variables."""

    def __init__(self, weights):
        self.steps = 4
        self.weights = weights

    def get_variables(self):
        return self.steps, self.weights, {"max_priority": 1.0}


class _Policy:
    def set_weights(self, weights):
        self.w = weights[0]

    def __call__(self, obs, state=None):
        return obs @ self.w, None  # misshapen weights raise here


def test_the_node_loop_raises_when_the_forward_pass_fails_and_no_caller_hangs():
    import threading

    server = BatchingServer(_Policy(), 8, 0.0, obs_shape=(2,))
    learner = _Learner([np.eye(3, dtype=np.float32)])  # 3x3 weights for 2-d observations
    stop = threading.Event()
    rows: list[dict] = []
    raised: list[BaseException] = []

    def loop():
        try:
            follow_learner(server, learner, stop.is_set, stop.wait, 0.01, 0.0, rows.append)
        except BaseException as err:  # noqa: BLE001 - asserted below
            raised.append(err)

    t = threading.Thread(target=loop)
    t.start()
    try:
        # A request of the wrong shape fails alone, before any batch.
        with pytest.raises(ValueError, match=r"observations of shape \[N, 2\] expected"):
            server.infer(np.ones((1, 5), np.float32), timeout=60)
        # A forward pass that fails: its caller gets ServerStopped naming the error...
        with pytest.raises(ServerStopped, match="ValueError"):
            server.infer(np.ones((1, 2), np.float32), timeout=60)
        t.join(60)  # ...and the node's loop raises it (the node then reports it)
        assert not t.is_alive() and raised and isinstance(raised[0], ValueError)
        with pytest.raises(ServerStopped):  # later callers: at once, never a hang
            server.infer(np.ones((1, 2), np.float32), timeout=60)
    finally:
        stop.set()
        t.join(60)
        server.close()
    assert rows and rows[0]["inference/param_version"] in (-1.0, 4.0)


class _Coordinator:
    """What a node calls on the coordinator: beats and metrics rows, kept."""

    def __init__(self):
        self.beats: list = []
        self.rows: list = []

    def heartbeat(self, beat) -> None:
        self.beats.append(beat)

    def write_metrics(self, component, step_key, row) -> None:
        self.rows.append((component, row))


def test_a_resumed_model_store_serves_the_checkpoints_newest_version_and_best_at_once(tmp_path):
    from apex.config import ApexConfig, to_dict
    from apex.model_store import ModelStore
    from launch.nodes import ModelStoreNode

    saved = ModelStore()
    weights = {v: [np.full((2, 2), v, np.float32), np.full(3, -v, np.float32)] for v in (5, 9)}
    for v in (5, 9):
        saved.push(v, weights[v], {"max_priority": 2.0})
    saved.offer_best(480.0, 5)
    saved.offer_best(120.0, 9)  # a later, worse evaluation
    state = {"steps": np.asarray(9), **saved.get_state()}
    manifest = {"format": checkpointing.FORMAT, "config": to_dict(ApexConfig())}
    replay = tmp_path / "reverb"
    replay.mkdir()
    (replay / "DONE").write_text("")
    path = checkpointing.write(
        str(tmp_path), 9, state, {"learner_steps": 9}, manifest, str(replay), 2
    )

    node = ModelStoreNode(ApexConfig(), _Coordinator(), path)
    try:
        version, served, info = node.get_variables()
        assert version == 9 and info["max_priority"] == 2.0
        for a, b in zip(served, weights[9]):
            np.testing.assert_array_equal(a, b)
        assert node.best() == (480.0, 5)
        best_version, best = node.best_variables()
        assert best_version == 5
        for a, b in zip(best, weights[5]):
            np.testing.assert_array_equal(a, b)
    finally:
        node.close()
