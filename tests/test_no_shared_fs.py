"""A run whose actors cannot write the run directory (as on a host that cannot
see it) trains, stops and resumes: everything they report goes over RPC."""

import json
import os

import pytest

from apex.lifecycle import NO_SHARED_FS_ENV
from tests.procs import run_train

pytestmark = pytest.mark.integration


@pytest.mark.timeout(420)
def test_actors_that_cannot_write_the_run_dir_train_stop_and_resume(tmp_path, monkeypatch):
    monkeypatch.setenv(NO_SHARED_FS_ENV, "1")
    run_dir = str(tmp_path / "run")
    common = (
        "--config.actor.num_actors=2",
        "--config.actor.envs_per_actor=4",
        "--config.replay.min_size=200",
        "--config.stop.max_wall_seconds=None",
    )
    out, first, _ = run_train(run_dir, *common, "--config.stop.max_actor_steps=6000", timeout=300)
    # The guard was on in both actor processes, and nothing they did needed a write.
    for i in (0, 1):
        assert f"actor_{i}: writes under the run directory are refused" in out, out[-3000:]
    assert "PermissionError" not in out, out[-3000:]
    assert first["stop_reason"] == "max_actor_steps" and first["failure"] is None
    assert first["env_steps"] >= 6000 and first["learner_steps"] > 0
    assert first["checkpoint"] is not None
    # What the actors report reached the run directory through the coordinator.
    for i in (0, 1):
        with open(os.path.join(run_dir, "metrics", f"actor_{i}.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        assert rows and rows[-1]["actor/env_steps"] > 0
        with open(os.path.join(run_dir, "heartbeats", f"actor_{i}.json")) as f:
            assert json.load(f)["state"] == "stopped"

    more = first["env_steps"] + 6000  # the limit counts the whole run, resumed or not
    out2, second, _ = run_train(
        run_dir, *common, f"--config.stop.max_actor_steps={more}", timeout=300
    )
    assert "PermissionError" not in out2, out2[-3000:]
    assert second["resumed_from"] == first["checkpoint"]["path"]
    assert second["stop_reason"] == "max_actor_steps" and second["failure"] is None
    assert second["env_steps"] >= more > first["env_steps"]
    assert second["learner_steps"] > first["checkpoint"]["learner_step"]
