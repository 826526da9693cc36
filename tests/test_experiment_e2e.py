"""An experiment end to end: 2 settings x 3 seeds of the default CartPole config
on a small budget, two trials at a time, stopped by SIGINT while trials train,
resumed by the same command, and reported; the report's numbers are the
trials' own summary.json figures. The trials' metrics go to W&B (offline) as
one group, and to MLflow as runs nested under the experiment's, every row once
across the stop."""

import json
import os
import signal
import statistics
import subprocess
import sys
import uuid

import numpy as np
import pytest

from tests.procs import ROOT, TOKEN_VAR, kill_tree, processes_with_token, wait_until
from tests.sink_readers import mlflow_history, mlflow_runs, wandb_offline

pytestmark = [pytest.mark.integration, pytest.mark.learning, pytest.mark.timeout(900)]

CONFIG = "configs/apex_cartpole.py"
SETS = [
    "learner.batch_size=32,64",
    # A small budget: 1 actor, a learner that starts at once, evaluations every second.
    "stop.max_actor_steps=12000",
    "stop.max_wall_seconds=120",  # a hang guard; the env steps are the budget
    "actor.num_actors=1",
    "actor.envs_per_actor=8",
    "replay.min_size=200",
    "evaluation.episodes=2",
    "evaluation.period_seconds=1",
    "logging.progress_period_seconds=0",
    # The trials' metrics also go to W&B (offline) and MLflow (a file store in the folder).
    "logging.wandb=true",
    "logging.mlflow=true",
]


def _command(out, *extra):
    sets = [a for s in SETS for a in ("--set", s)]
    return [
        sys.executable, "-m", "launch.experiment", f"--config={CONFIG}", "--seeds=3",
        *sets, f"--out={out}", "--parallel=2", "--no-hparams", *extra,
    ]  # fmt: skip


def _record(out):
    try:
        with open(os.path.join(out, "experiment.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _summary(out, trial):
    with open(os.path.join(out, trial["run_dir"], "summary.json")) as f:
        return json.load(f)


def _states(out):
    record = _record(out) or {"trials": []}
    return {t["id"]: (t["state"], t["cause"]) for t in record["trials"]}


def _training_trial(out, proc):
    """A running trial whose learner has trained (a final checkpoint will follow a
    stop). An experiment that ended before fails the test at once, with its trials'
    states and causes."""
    if proc.poll() is not None:
        raise AssertionError(f"the experiment exited {proc.returncode} first: {_states(out)}")
    record = _record(out) or {"trials": []}
    for t in record["trials"]:
        if t["state"] != "running":
            continue
        try:
            with open(os.path.join(out, t["run_dir"], "state.json")) as f:
                if (json.load(f).get("learner_steps") or 0) > 20:
                    return t["id"]
        except (OSError, ValueError):
            continue
    return None


def test_an_experiment_stops_on_sigint_resumes_and_reports_its_trials_summaries(tmp_path):
    out = str(tmp_path / "exp")
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VAR: token})
    proc = subprocess.Popen(
        _command(out),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: _training_trial(out, proc),
            300,
            lambda: f"a trial whose learner trains; trials: {_states(out)}",
        )
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the experiment forwards it to its trials
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 130, output
        wait_until(lambda: not processes_with_token(token), 120, "every trial process to exit")
    finally:
        kill_tree(proc, token)
    record = _record(out)
    states = [t["state"] for t in record["trials"]]
    assert "stopped" in states and set(states) <= {"finished", "stopped", "pending"}, states
    had_checkpoint = {}
    for t in record["trials"]:
        if t["state"] == "stopped":
            assert t["cause"] == "stopped by SIGINT"
            assert _summary(out, t)["stop_reason"] == "stopped"
            ckpts = os.path.join(out, t["run_dir"], "checkpoints")
            had_checkpoint[t["id"]] = any(
                os.path.isfile(os.path.join(ckpts, n, "COMPLETE")) for n in os.listdir(ckpts)
            ) if os.path.isdir(ckpts) else False  # fmt: skip
    assert any(had_checkpoint.values()), had_checkpoint  # the trial that trained wrote its own
    finished_before = {
        t["id"]: len(t["attempts"]) for t in record["trials"] if t["state"] == "finished"
    }

    # A different grid into the same folder is refused; the same command resumes.
    bad = subprocess.run(
        [*_command(out)[:-1], "--set", "learner.dueling=false", "--no-hparams"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "another --out" in bad.stderr, bad.stderr
    again = subprocess.run(
        _command(out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stdout[-3000:]
    assert not processes_with_token(token)
    record = _record(out)
    assert [t["state"] for t in record["trials"]] == ["finished"] * 6
    for t in record["trials"]:
        if t["id"] in finished_before:  # skipped, not rerun
            assert len(t["attempts"]) == finished_before[t["id"]]
        if had_checkpoint.get(t["id"]):  # resumed from its checkpoint
            assert t["attempts"][-1]["resume"] is True
            assert _summary(out, t)["resumed_from"] is not None

    # The sinks: one MLflow parent run and a child per trial, one W&B group.
    uri = "file:" + os.path.join(out, "mlruns")
    runs = mlflow_runs(uri)
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.info.run_name == "exp"
    children = {r.data.tags["apex.run_dir"]: r for r in runs if r is not parent}
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {parent.info.run_id}
    for t in record["trials"]:
        run_dir = os.path.join(out, t["run_dir"])
        child, summary = children.pop(run_dir), _summary(out, t)
        assert child.info.status == "FINISHED", t["id"]
        assert child.data.metrics["summary/learner_steps"] == summary["learner_steps"]
        with open(os.path.join(run_dir, "metrics", "learner.csv")) as f:
            rows = [line for line in f if ",learner/steps," in line]
        assert len(mlflow_history(uri, child.info.run_id, "learner/steps")) == len(rows)
        lives = wandb_offline(run_dir)
        assert {(life["id"], life["group"]) for life in lives} == {(lives[0]["id"], "exp")}
        assert lives[-1]["summary"]["summary/learner_steps"] == summary["learner_steps"]
        sent = [h for life in lives for h in life["history"] if "learner/steps" in h]
        assert len(sent) == len(rows), t["id"]
    assert not children

    # The report: every figure from the trials' summary.json.
    rep = subprocess.run(
        [sys.executable, "-m", "tools.experiment", "report", out, "--json", "--reps=500"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert [s["setting"] for s in report["settings"]] == [
        "learner.batch_size=32",
        "learner.batch_size=64",
    ]
    for s in report["settings"]:
        trials = [t for t in record["trials"] if t["setting"] == s["setting"]]
        finals = sorted(_summary(out, t)["eval_return_mean"] for t in trials)
        bests = [_summary(out, t)["best_eval_return_mean"] for t in trials]
        m = s["metrics"]["final_eval_return"]
        assert m["n"] == 3
        assert m["median"] == pytest.approx(statistics.median(finals))
        assert m["iqm"] == pytest.approx(np.mean(finals))  # 3 runs: int(0.75) = 0 cut
        assert finals[0] <= m["iqm_ci"][0] <= m["iqm"] <= m["iqm_ci"][1] <= finals[-1]
        assert s["metrics"]["best_eval_return"]["median"] == pytest.approx(statistics.median(bests))
        solved = [_summary(out, t)["solved_at_env_steps"] for t in trials]
        assert s["metrics"]["env_steps_to_target"]["n"] == sum(v is not None for v in solved)
    assert {c["metric"] for c in report["comparisons"]} == {"final_eval_return", "best_eval_return"}
    assert all(
        0.0 <= c["ci"][0] <= c["probability"] <= c["ci"][1] <= 1.0 for c in report["comparisons"]
    )
    png = os.path.join(out, "plots", "eval_return.png")
    assert report["plots"] == [png] and open(png, "rb").read(4) == b"\x89PNG"
