"""Every stop ends inside the stop window on the shipped Atari configs, with a real
ALE game: evaluation mid-episode, actors mid-insert and the learner's final
checkpoint of a replay of frames all give way before Launchpad's kill.

Seen before the fix: a 60 s Breakout run ended 92.5 s after launch in a stack
dump ("Worker groups that did not terminate in time", "Killing entire
runtime"), once with exit 137, and a 206.7 MB checkpoint at learner step 0.
The observable is how the run ends, never how long it took.
"""

import os

import pytest

from apex import checkpointing
from tests.procs import STARTUP_TIMEOUT, STOP_TIMEOUT, run_train, wait_until_gone

pytestmark = pytest.mark.integration

KILLED = ("Killing entire runtime", "did not terminate in time", "Traceback")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "config,sized",
    [
        ("configs/apex_atari.py", ["--config.replay.min_size=300"]),
        # An SGD step on 32 sequences of 80 frames takes tens of seconds on 2 cores.
        ("configs/r2d2_atari.py", ["--config.replay.min_size=40", "--config.learner.batch_size=2"]),
    ],
    ids=["apex_atari", "r2d2_atari"],
)
def test_a_stop_on_atari_ends_inside_the_window_with_a_final_checkpoint(tmp_path, config, sized):
    run_dir = str(tmp_path / "run")
    out, summary, token = run_train(
        run_dir,
        # Stop once the learner has trained (however long that takes on this
        # machine), so the stop writes a checkpoint of a replay of frames.
        "--config.stop.max_learner_steps=3",
        "--config.stop.max_wall_seconds=None",
        "--config.actor.num_actors=1",
        *sized,
        "--config.replay.samples_per_insert=0.25",
        # Greedy evaluation episodes back to back: the stop finds one mid-episode. On
        # Breakout an untrained greedy policy rarely presses FIRE, so its episode
        # runs to the 108k-frame limit: minutes, unless evaluation gives way.
        "--config.env.id=ALE/Breakout-v5",
        "--config.evaluation.period_seconds=0.1",
        "--config.logging.progress_period_seconds=10",
        timeout=STARTUP_TIMEOUT + STOP_TIMEOUT,
        config=config,
    )
    for line in KILLED:
        assert line not in out, out[-4000:]
    assert "stepped as one vector env: ale (auto)" in out  # ALE's C++ vector env
    assert summary["stop_reason"] == "max_learner_steps"
    assert summary["learner_steps"] >= 3
    # The final checkpoint is complete, named by summary.json, and of this learner step.
    final = checkpointing.load(checkpointing.latest_complete(run_dir))
    assert summary["checkpoint"]["path"] == final.path
    assert final.step == summary["learner_steps"]
    assert os.path.isfile(os.path.join(final.path, checkpointing.REPLAY_DIR, "DONE"))
    wait_until_gone(token)
