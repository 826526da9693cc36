"""tools.plot writes the PNGs with the expected series from a run's metrics."""

import os

from apex.metrics import MetricsWriter
from tools.plot import plot_run


def test_plots_have_the_expected_series(tmp_path):
    run_dir = str(tmp_path)
    coord = MetricsWriter(run_dir, "coordinator", "coordinator/env_steps", tensorboard=False)
    learner = MetricsWriter(run_dir, "learner", "learner/steps", tensorboard=False)
    evaluator = MetricsWriter(run_dir, "evaluator", tensorboard=False)
    actor = MetricsWriter(run_dir, "actor_0", tensorboard=False)
    for i in range(5):
        coord.write(
            {
                "coordinator/env_steps": 1000 * i,
                "coordinator/env_steps_per_second": 4000.0,
                "coordinator/learner_steps_per_second": 250.0,
                "replay/samples_per_insert": 3.9,
            }
        )
        learner.write(
            {
                "learner/policy_lag_p50_steps": 10.0 + i,
                "learner/policy_lag_p90_steps": 20.0,
                "learner/policy_lag_max_steps": 30.0,
                "learner/sample_age_p50_seconds": 1.0,
                "learner/sample_age_p90_seconds": 2.0,
            }
        )
        evaluator.write({"evaluator/return_mean": 10.0 * i})
        actor.write({"actor/episode_return_band_0": 5.0, "actor/episode_return_band_2": 7.0})
    for w in (coord, learner, evaluator, actor):
        w.close()
    written = plot_run(run_dir)
    names = {os.path.basename(p): labels for p, labels in written.items()}
    assert set(names) == {"eval_return.png", "throughput.png", "policy_lag.png", "band_returns.png"}
    assert names["throughput.png"] == ["env steps/s", "learner steps/s", "samples per insert"]
    assert "policy lag p90" in names["policy_lag.png"]
    assert names["band_returns.png"] == ["eps<0.01", "eps>=0.1"]  # default bands, as run
    for path in written:
        assert open(path, "rb").read(4) == b"\x89PNG" and os.path.getsize(path) > 5000


def test_plots_count_seconds_from_the_runs_clock_not_the_first_row(tmp_path, monkeypatch):
    """summary.json's clock_start_time (the launch) is the plots' zero, so that a
    plot's 'solved at 26 s' is the summary's."""
    import json

    import tools.plot as plot

    run_dir = str(tmp_path)
    launch = 1_000_000.0
    evaluator = MetricsWriter(run_dir, "evaluator", tensorboard=False)
    evaluator.write({"time": launch + 10.0, "evaluator/return_mean": 500.0})
    evaluator.close()
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump({"clock_start_time": launch, "wall_seconds": 30.0}, f)
    zeros = []
    series = plot._series

    def recording(rows, key, t0):
        zeros.append(t0)
        return series(rows, key, t0)

    monkeypatch.setattr(plot, "_series", recording)
    plot.plot_run(run_dir)
    assert zeros and set(zeros) == {launch}
    assert series([{"time": launch + 10.0, "k": 1.0}], "k", launch) == ([10.0], [1.0])
