"""launch.experiment without programs: the grid's parsing and validation, the
record's state machine driven by a fake trial runner (finish, fail, stop,
resume, retry, no room on Ray, parallelism), and tools.experiment's report
and HParams on trials whose summary.json and metrics the test wrote."""

import json
import os
import signal
import subprocess
import sys

import pytest

from apex import ConfigError
from launch import experiment_record as rec
from launch.experiment import NO_ROOM, Runner, failure_cause, parse_args, validate_grid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "configs/apex_cartpole.py"


# -- the grid -------------------------------------------------------------------
def test_values_split_on_commas_outside_brackets_and_quotes():
    assert rec.split_values("64,256") == ["64", "256"]
    assert rec.split_values("(64, 64),(128,)") == ["(64, 64)", "(128,)"]
    assert rec.split_values("'a,b',c") == ["'a,b'", "c"]
    assert rec.split_values("{'x': 1, 'y': 2}") == ["{'x': 1, 'y': 2}"]


def test_sets_make_a_grid_and_its_trials_in_order():
    grid = rec.parse_sets(["learner.batch_size=64,256", "--config.replay.samples_per_insert=4,8"])
    assert grid == {"learner.batch_size": ["64", "256"], "replay.samples_per_insert": ["4", "8"]}
    trials = rec.make_trials(grid, [0, 1, 2])
    assert len(trials) == 12
    assert trials[0]["id"] == "learner.batch_size=64+replay.samples_per_insert=4/seed-0"
    assert trials[0]["setting"] == "learner.batch_size=64 replay.samples_per_insert=4"
    assert [t["setting_index"] for t in trials[::3]] == [0, 1, 2, 3]
    assert trials[-1]["run_dir"] == os.path.join(
        "trials", "learner.batch_size=256+replay.samples_per_insert=8", "seed-2"
    )
    # A one-value --set is a fixed override: in every trial, not in the label.
    grid = rec.parse_sets(["stop.max_wall_seconds=30", "env.id=CartPole-v1,ALE/Pong-v5"])
    trials = rec.make_trials(grid, [0])
    assert [t["setting"] for t in trials] == ["env.id=CartPole-v1", "env.id=ALE/Pong-v5"]
    assert trials[1]["run_dir"] == os.path.join("trials", "env.id=ALE_Pong-v5", "seed-0")
    assert trials[1]["overrides"]["stop.max_wall_seconds"] == "30"
    assert rec.make_trials({}, [3])[0]["id"] == "base/seed-3"


@pytest.mark.parametrize(
    "item, named",
    [
        ("learner.batch_size", "the form --set"),
        ("seed=1,2", "the experiment sets them"),
        ("learner.seed=1", "the experiment sets them"),
        ("run_dir=x", "the experiment sets them"),
        ("learner.batch_size=64,,128", "non-empty values"),
        ("learner.batch_size=64,64", "distinct values"),
    ],
)
def test_a_malformed_set_is_refused_naming_it(item, named):
    with pytest.raises(ConfigError) as err:
        rec.parse_sets([item])
    assert err.value.field == "--set" and item in str(err.value) and named in str(err.value)


def test_a_field_given_twice_is_refused():
    with pytest.raises(ConfigError, match="given twice"):
        rec.parse_sets(["learner.batch_size=64", "learner.batch_size=128"])


def test_seeds_are_a_count_or_a_list():
    assert rec.parse_seeds("3") == [0, 1, 2]
    assert rec.parse_seeds("0,3,7") == [0, 3, 7]
    for bad in ("0", "-1", "x", "1,1", "1,-2"):
        with pytest.raises(ConfigError) as err:
            rec.parse_seeds(bad)
        assert err.value.field == "--seeds"


def test_every_setting_is_validated_naming_the_field_value_and_setting():
    grid = rec.parse_sets(["learner.batch_size=64,0"])
    with pytest.raises(ConfigError) as err:
        validate_grid(CONFIG, grid, [0])
    assert err.value.field == "learner.batch_size" and err.value.value == 0
    assert "setting 'learner.batch_size=0'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        validate_grid(CONFIG, rec.parse_sets(["learner.batch_sise=64"]), [0])
    assert err.value.field == "learner.batch_sise" and "batch_size" in err.value.valid
    # The project's cross-field checks too (the rate-limit planner's).
    with pytest.raises(ConfigError) as err:
        validate_grid(CONFIG, rec.parse_sets(["replay.min_size=100,100000"]), [0])
    assert err.value.field == "replay.min_size" and "replay.capacity" in err.value.valid
    assert len(validate_grid(CONFIG, rec.parse_sets(["learner.batch_size=64,128"]), [0])) == 2


def test_flags_the_experiment_owns_are_refused_after_the_separator():
    with pytest.raises(ConfigError, match="--config.seed=3"):
        parse_args(["--config=c.py", "--out=o", "--", "--config.seed=3"])
    with pytest.raises(ConfigError, match="--parallel"):
        parse_args(["--config=c.py", "--out=o", "--parallel=0"])
    with pytest.raises(ConfigError, match="--ray_address"):
        parse_args(["--config=c.py", "--out=o", "--ray_address=h:1"])
    with pytest.raises(ConfigError, match="--ray_simulate_nodes"):
        parse_args(["--config=c.py", "--out=o", "--ray_simulate_nodes=2"])
    with pytest.raises(ConfigError, match="no --ray_address with --ray_simulate_nodes"):
        parse_args(
            [
                "--config=c.py",
                "--out=o",
                "--launcher=ray",
                "--ray_address=h:1",
                "--ray_simulate_nodes=2",
            ]
        )
    _, train = parse_args(["--config=c.py", "--out=o", "--launcher=ray", "--ray_address=h:1"])
    assert train == ["--launcher=ray", "--ray_address=h:1"]
    args, train = parse_args(["--config=c.py", "--out=o", "--", "--node_start=spawn"])
    assert train == ["--node_start=spawn"] and args.parallel == 1


def test_a_different_grid_into_the_same_folder_is_refused():
    grid = {"learner.batch_size": ["64", "256"]}
    record = rec.new_record(CONFIG, grid, [0, 1], commit=None, argv=[])
    rec.check_same(record, CONFIG, dict(grid), [0, 1], "exp")  # the same: no error
    with pytest.raises(ConfigError) as err:
        rec.check_same(record, CONFIG, {"learner.batch_size": ["64"]}, [0, 1], "exp")
    assert err.value.field == "--set" and "another --out" in str(err.value)
    with pytest.raises(ConfigError, match="--seeds"):
        rec.check_same(record, CONFIG, grid, [0, 1, 2], "exp")
    with pytest.raises(ConfigError, match="--config"):
        rec.check_same(record, "configs/r2d2_cartpole_masked.py", grid, [0, 1], "exp")


# -- the state machine, with fake trials ----------------------------------------
class FakeTrial:
    """A trial that ends with `rc` after `polls` polls (at once on a signal:
    130/143), writing the summary a run would."""

    def __init__(self, world, trial, argv, log):
        self.world, self.trial, self.argv = world, trial, argv
        plan = world.plans.get(trial["id"], [(0, 1)])
        n = world.count[trial["id"]] = world.count.get(trial["id"], 0) + 1
        self.rc, self.polls = plan[min(n - 1, len(plan) - 1)]
        self.signals = []
        self.output_text = world.outputs.get(trial["id"], "")
        world.started.append((trial["id"], argv))
        world.live += 1
        world.most = max(world.most, world.live)

    def poll(self):
        if self.signals and self.signals[0] in (signal.SIGINT, signal.SIGTERM):
            if self.world.die_on_signal:  # still importing: Python's own SIGINT death
                return self._end(-signal.SIGINT)
            return self._end(130 if self.signals[0] == signal.SIGINT else 143)
        self.polls -= 1
        if self.world.stop_after_polls is not None:
            self.world.stop_after_polls -= 1
            if self.world.stop_after_polls == 0:
                self.world.runner.request_stop(signal.SIGINT)
        return self._end(self.rc) if self.polls < 0 else None

    def _end(self, rc):
        self.world.live -= 1
        run_dir = next(a for a in self.argv if a.startswith("--config.run_dir=")).split("=", 1)[1]
        os.makedirs(run_dir, exist_ok=True)
        summary = {
            "eval_return_mean": 1.0,
            "failure": "learner: ValueError: boom" if rc == 1 else None,
        }
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump({}, f)
        if rc in (0, 130):  # a final checkpoint
            os.makedirs(os.path.join(run_dir, "checkpoints", "ckpt-000000010"), exist_ok=True)
            open(os.path.join(run_dir, "checkpoints", "ckpt-000000010", "COMPLETE"), "w").close()
        return rc

    def signal(self, sig):
        self.signals.append(sig)

    def output(self):
        return self.output_text


class World:
    def __init__(self):
        self.plans, self.outputs = {}, {}
        self.started, self.live, self.most = [], 0, 0
        self.count = {}  # starts per trial, over every run
        self.stop_after_polls = None
        self.die_on_signal = False
        self.runner = None

    def starts_of(self, trial_id):
        return [a for t, a in self.started if t == trial_id]

    def run(self, out, record, **kw):
        self.runner = Runner(
            str(out),
            record,
            [],
            start=lambda t, argv, log: FakeTrial(self, t, argv, log),
            say=lambda line: None,
            poll_seconds=0,
            **kw,
        )
        code = self.runner.run()
        return code, rec.load_record(str(out))


def _record(seeds=(0, 1), grid=None):
    return rec.new_record(
        CONFIG, grid or {"learner.batch_size": ["64", "128"]}, list(seeds), commit="abc", argv=[]
    )


def test_trials_that_all_finish_are_recorded_finished_with_exit_0(tmp_path):
    world = World()
    code, record = world.run(tmp_path, _record())
    assert code == 0
    assert [t["state"] for t in record["trials"]] == ["finished"] * 4
    assert all(t["returncode"] == 0 and len(t["attempts"]) == 1 for t in record["trials"])
    assert world.most == 1  # one at a time by default
    argv = world.starts_of("learner.batch_size=128/seed-1")[0]
    assert argv[1:4] == ["-m", "launch.train", f"--config={CONFIG}"]
    assert "--config.learner.batch_size=128" in argv
    assert "--config.seed=1" in argv and "--config.learner.seed=1" in argv
    assert f"--config.run_dir={tmp_path}/trials/learner.batch_size=128/seed-1" in argv
    assert "--resume" not in argv


def test_parallel_runs_that_many_at_once(tmp_path):
    world = World()
    world.plans = {t["id"]: [(0, 3)] for t in _record()["trials"]}
    code, _ = world.run(tmp_path, _record(), parallel=3)
    assert code == 0 and world.most == 3


def test_a_failed_trial_is_recorded_with_its_cause_and_the_others_go_on(tmp_path):
    world = World()
    world.plans = {"learner.batch_size=64/seed-1": [(1, 0), (0, 0)]}
    code, record = world.run(tmp_path, _record())
    assert code == 1
    states = {t["id"]: (t["state"], t["cause"]) for t in record["trials"]}
    assert states["learner.batch_size=64/seed-1"] == ("failed", "learner: ValueError: boom")
    assert sum(s == "finished" for s, _ in states.values()) == 3
    # A rerun skips finished and failed trials; --retry-failed reruns the failed one.
    world.started.clear()
    code, record = world.run(tmp_path, record)
    assert code == 1 and world.started == []
    code, record = world.run(tmp_path, record, retry_failed=True)
    assert code == 0 and [t for t, _ in world.started] == ["learner.batch_size=64/seed-1"]
    assert world.started[0][1][-1] != "--resume"  # no complete checkpoint: afresh
    trial = record["trials"][1]
    assert trial["state"] == "finished" and len(trial["attempts"]) == 2
    # Its failed run directory (a run, no complete checkpoint) was kept aside.
    assert trial["attempts"][1]["moved_aside"].endswith("seed-1.attempt-1")
    assert os.path.isfile(
        os.path.join(tmp_path, trial["attempts"][1]["moved_aside"], "summary.json")
    )


def test_a_stop_forwards_the_signal_records_stopped_and_a_rerun_resumes(tmp_path):
    world = World()
    world.plans = {t["id"]: [(0, 5)] for t in _record()["trials"]}
    world.stop_after_polls = 3  # SIGINT while the second trial of two at once runs
    code, record = world.run(tmp_path, _record(), parallel=2)
    assert code == 130
    states = [t["state"] for t in record["trials"]]
    # Seed by seed: both settings of seed 0 ran first (trials are listed settings slowest).
    assert states == ["stopped", "pending", "stopped", "pending"]
    assert record["trials"][0]["cause"] == "stopped by SIGINT"
    # The rerun resumes the stopped ones first (from their checkpoints), then the rest.
    world.started.clear()
    world.plans = {}
    code, record = world.run(tmp_path, record, parallel=2)
    assert code == 0
    assert [t["state"] for t in record["trials"]] == ["finished"] * 4
    first = dict(world.started[:2])
    assert set(first) == {"learner.batch_size=64/seed-0", "learner.batch_size=128/seed-0"}
    assert all(argv[-1] == "--resume" for argv in first.values())
    assert record["trials"][0]["attempts"][1]["resume"] is True


def test_a_trial_that_dies_of_the_forwarded_stop_is_stopped_not_failed(tmp_path):
    world = World()
    world.plans = {t["id"]: [(0, 5)] for t in _record()["trials"]}
    world.stop_after_polls, world.die_on_signal = 2, True
    code, record = world.run(tmp_path, _record())
    assert code == 130
    first = record["trials"][0]
    assert first["state"] == "stopped" and first["cause"] == "stopped by SIGINT (exit -2)"


def test_pending_trials_alternate_settings_seed_by_seed():
    record = _record(seeds=(3, 1))
    assert [t["id"] for t in rec.to_run(record, False)] == [
        "learner.batch_size=64/seed-3",
        "learner.batch_size=128/seed-3",
        "learner.batch_size=64/seed-1",
        "learner.batch_size=128/seed-1",
    ]


def test_the_rerun_of_a_killed_experiment_resumes_its_running_trials(tmp_path):
    record = _record(seeds=(0,))
    record["trials"][1]["state"] = "running"  # the experiment died (SIGKILL) meanwhile
    assert [t["id"] for t in rec.to_run(record, False)][0] == "learner.batch_size=128/seed-0"


def test_a_rerun_is_refused_while_a_trial_of_a_killed_experiment_still_runs(tmp_path):
    import time

    import psutil

    from launch.experiment import check_no_live_trials

    record = _record(seeds=(0,))
    me = psutil.Process()  # stands for the trial's launch.train, alive
    record["trials"][0].update(state="running", attempts=[{"started": time.time(), "pid": me.pid}])
    with pytest.raises(ConfigError, match=f"pid {me.pid}"):
        check_no_live_trials(record)
    # A pid born after the attempt started is another process (the pid reused):
    # the trial's own is gone, and the rerun resumes it.
    record["trials"][0]["attempts"][0]["started"] = me.create_time() - 60.0
    check_no_live_trials(record)


def test_a_trial_the_ray_cluster_has_no_room_for_waits_for_one_to_end(tmp_path):
    world = World()
    # The second trial is refused while the first runs, then fits.
    world.plans = {
        "learner.batch_size=64/seed-0": [(0, 4)],
        "learner.batch_size=64/seed-1": [(2, 0), (0, 0)],
    }
    world.outputs = {"learner.batch_size=64/seed-1": f"apex: the program {NO_ROOM}: 4 CPUs"}
    code, record = world.run(tmp_path, _record(), parallel=4)
    assert code == 0
    assert [t["state"] for t in record["trials"]] == ["finished"] * 4
    assert len(world.starts_of("learner.batch_size=64/seed-1")) == 2
    assert len(record["trials"][1]["attempts"]) == 1  # the refused start is not an attempt


def test_a_trial_past_its_timeout_is_stopped_and_failed(tmp_path):
    world = World()
    world.plans = {"learner.batch_size=64/seed-0": [(0, 10**6)]}  # never ends by itself
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    runner = Runner(
        str(tmp_path),
        _record(seeds=(0,)),
        [],
        start=lambda t, argv, log: FakeTrial(world, t, argv, log),
        say=lambda line: None,
        poll_seconds=0,
        trial_timeout=5.0,
        clock=clock,
    )
    world.runner = runner
    assert runner.run() == 1
    record = rec.load_record(str(tmp_path))
    first, second = record["trials"]
    assert first["state"] == "failed" and first["cause"] == "timed out after 5 s (--trial_timeout)"
    assert first["returncode"] == 143  # its orderly stop (SIGTERM)
    assert second["state"] == "finished"


def test_failure_causes_read_in_one_line():
    assert failure_cause(-9, "", None) == "killed by SIGKILL"
    assert failure_cause(1, "x", {"failure": "actor_0: died"}) == "actor_0: died"
    out = "[apex] something\napex: invalid configuration: stop.max_wall_seconds=5 is invalid\n"
    assert failure_cause(2, out, None) == "exit 2: " + out.splitlines()[1]
    assert failure_cause(3, "last words\n", None) == "exit 3: last words"


# -- the report and the dashboard -------------------------------------------------
def _fake_experiment(out, finals, solved):
    """An experiment folder of finished trials whose summary.json and evaluator
    metrics say `finals` (per setting, per seed) and `solved` env steps."""
    from apex.metrics import MetricsWriter

    grid = {"learner.batch_size": ["64", "128"]}
    record = rec.new_record(CONFIG, grid, [0, 1, 2], commit="abc", argv=[])
    for t in record["trials"]:
        final = finals[t["setting_index"]][t["seed"]]
        steps = solved[t["setting_index"]][t["seed"]]
        run_dir = os.path.join(out, t["run_dir"])
        os.makedirs(run_dir)
        summary = {
            "eval_return_mean": final,
            "best_eval_return_mean": final + 10,
            "solved_at_env_steps": steps,
            "solved_at_wall_seconds": None if steps is None else steps / 1000,
            "clock_start_time": 1000.0,
            "target_return": 475.0,
            "env_steps": 30000,
            "wall_seconds": 30.0,
            "stop_reason": "max_wall_seconds",
        }
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump({"env": {"id": "CartPole-v1"}, "evaluation": {"target_return": 475.0}}, f)
        w = MetricsWriter(run_dir, "evaluator", tensorboard=False)
        for i in range(4):
            w.write({"time": 1000.0 + 10 * i, "evaluator/env_steps": 10000 * i,
                     "evaluator/return_mean": final * i / 3})  # fmt: skip
        w.close()
        t.update(
            state="finished",
            attempts=[{"started": 999.0, "ended": 1040.0, "clock_start_time": 1000.0}],
        )
    rec.save_record(out, record)
    return record


def test_the_report_is_the_trials_summaries_in_median_iqm_and_ci(tmp_path):
    from tools.experiment_report import analyse, render

    out = str(tmp_path)
    _fake_experiment(
        out,
        [[100.0, 200.0, 300.0], [400.0, 500.0, 450.0]],
        [[None, 9000, 11000], [5000, 6000, 7000]],
    )
    report = analyse(out, reps=500)
    a, b = report["settings"]
    assert a["setting"] == "learner.batch_size=64" and a["finished"] == 3
    fa, fb = a["metrics"]["final_eval_return"], b["metrics"]["final_eval_return"]
    assert fa["median"] == 200.0 and fa["iqm"] == pytest.approx(200.0) and fa["n"] == 3
    assert fb["median"] == 450.0 and fb["iqm"] == pytest.approx(450.0)
    assert 100.0 <= fa["iqm_ci"][0] <= 200.0 <= fa["iqm_ci"][1] <= 300.0
    assert b["metrics"]["best_eval_return"]["median"] == 460.0
    solved = a["metrics"]["env_steps_to_target"]
    assert solved["n"] == 2 and solved["of"] == 3 and solved["median"] == 10000.0
    assert a["metrics"]["wall_seconds_to_target"]["median"] == pytest.approx(10.0)
    (poi_final, poi_best) = report["comparisons"]
    assert poi_final["a"] == 1 and poi_final["b"] == 0 and poi_final["probability"] == 1.0
    assert poi_final["ci"] == [1.0, 1.0]
    text = render({k: v for k, v in report.items() if k != "_groups"})
    assert (
        "learner.batch_size=128" in text and "2/3" in text and "#1 > #0: 1.00 [1.00, 1.00]" in text
    )


def test_the_report_draws_the_curves_and_leaves_out_unfinished_trials(tmp_path):
    from tools.experiment_curves import on_grid, plot_experiment
    from tools.experiment_report import analyse

    out = str(tmp_path)
    record = _fake_experiment(out, [[100.0, 200.0, 300.0], [400.0, 500.0, 450.0]], [[None] * 3] * 2)
    record["trials"][0].update(state="failed", cause="exit 1: boom")
    rec.save_record(out, record)
    report = analyse(out, reps=200)
    assert report["settings"][0]["metrics"]["final_eval_return"]["n"] == 2
    groups = report["_groups"]
    x, values = on_grid(groups[1]["curves"], "env_steps", points=4)
    assert list(x) == [0.0, 10000.0, 20000.0, 30000.0]
    assert values[:, -1] == pytest.approx([400.0, 500.0, 450.0])
    x, values = on_grid(groups[1]["curves"], "wall_seconds", points=4)
    assert list(x) == [0.0, 10.0, 20.0, 30.0]
    drawn = plot_experiment(out, groups, "test")
    assert drawn["path"] == os.path.join(out, "plots", "eval_return.png")
    assert open(drawn["path"], "rb").read(4) == b"\x89PNG"
    assert len(drawn["series"]) == 4  # 2 settings x (env steps, wall seconds)


@pytest.mark.slow  # imports TensorBoard's HParams plugin (and TensorFlow with it)
def test_hparams_are_written_for_tensorboards_dashboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from launch import experiment_tb

    grid = {"learner.batch_size": ["64", "128"], "learner.dueling": ["true", "false"]}
    trial = rec.make_trials(grid, [2])[0]
    run_dir = str(tmp_path / "trial")
    folder = experiment_tb.write_trial(run_dir, trial, {"eval_return_mean": 321.0, "env_steps": 5})
    config = experiment_tb.write_config(str(tmp_path), grid)
    acc = EventAccumulator(folder)
    acc.Reload()
    assert acc.Scalars("experiment/final_eval_return")[0].value == 321.0
    from tensorboard.plugins.hparams import plugin_data_pb2

    meta = acc.summary_metadata["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(
        meta.plugin_data.content
    ).session_start_info
    assert start.group_name == "learner.batch_size=64 learner.dueling=true"
    assert start.hparams["learner.batch_size"].number_value == 64
    assert start.hparams["learner.dueling"].bool_value is True
    acc = EventAccumulator(config)
    acc.Reload()
    meta = acc.summary_metadata["_hparams_/experiment"]
    exp = plugin_data_pb2.HParamsPluginData.FromString(meta.plugin_data.content).experiment
    assert [h.name for h in exp.hparam_infos] == ["learner.batch_size", "learner.dueling"]
    assert "experiment/final_eval_return" in [m.name.tag for m in exp.metric_infos]


@pytest.mark.cli
def test_the_command_refuses_a_bad_grid_before_anything_runs(tmp_path):
    out = tmp_path / "exp"
    cmd = [sys.executable, "-m", "launch.experiment", f"--config={CONFIG}", f"--out={out}"]
    proc = subprocess.run(
        [*cmd, "--set", "learner.batch_size=64,-3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "learner.batch_size=-3 is invalid" in proc.stderr
    assert not out.exists()
    proc = subprocess.run(
        [*cmd, "--seeds=2", "--set", "learner.batch_size=64,128", "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "2 setting(s) x 2 seed(s) = 4 trials" in proc.stdout
