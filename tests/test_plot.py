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
