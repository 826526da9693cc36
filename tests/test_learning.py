"""Learning: the default CartPole config reaches the solve target within a bounded budget."""

import pytest

from tests.procs import run_train

pytestmark = pytest.mark.learning


@pytest.mark.timeout(420)
def test_default_config_solves_cartpole(tmp_path):
    run_dir = str(tmp_path / "run")
    # Fixed seed (config.seed = 0). Budget: 300 s wall; the default run solves in about a minute.
    _, s, _ = run_train(
        run_dir,
        "--config.stop.when_solved=true",
        "--config.stop.max_wall_seconds=300",
        "--config.stop.max_actor_steps=None",
        timeout=400,
    )
    assert s["solved_at_wall_seconds"] is not None, s
    assert s["eval_return_mean"] >= 475.0
    assert s["stop_reason"] == "solved"
