"""Replay-content checks shared by tests that read real items back."""

from __future__ import annotations

import numpy as np
import pytest


def assert_cartpole_nstep(data: dict, gamma: float, n: int) -> None:
    """A CartPole transition's stored n-step values are right: CartPole pays 1 per
    step, so a transition of k steps carries sum_{j<k} gamma^j and a discount of
    gamma^k, or 0 when its episode terminated within the n steps."""
    returns = {k: sum(gamma**j for j in range(k)) for k in range(1, n + 1)}
    reward, discount = float(data["reward"]), float(data["discount"])
    if discount > 0:
        k = int(round(np.log(discount) / np.log(gamma)))
        assert 1 <= k <= n and discount == pytest.approx(gamma**k, rel=1e-6)
        assert reward == pytest.approx(returns[k], rel=1e-6)
    else:  # terminated within the n steps: no bootstrap
        assert any(reward == pytest.approx(r, rel=1e-6) for r in returns.values())


def assert_final_checkpoint_nstep(
    run_dir: str, since: float | None = None, actor_id: int = 0
) -> dict:
    """assert_cartpole_nstep on every item of the run's latest complete
    checkpoint, every shard; returns the items' count by actor, under "after"
    those of actor `actor_id` made after `since`, and under ("shard", s) the
    items of shard s."""
    from apex import checkpointing
    from apex.config import ApexConfig
    from apex.replay.tables import unpack_item
    from tools.replay_inspect import checkpoint_reader as cr

    replay = ApexConfig().replay
    path = checkpointing.latest_complete(run_dir)
    assert path, f"no complete checkpoint in {run_dir}"
    counts: dict = {"after": 0}
    for s, shard_path in enumerate(checkpointing.load(path).shard_paths):
        counts["shard", s] = 0
        for item in cr.iter_items(shard_path, "transitions"):
            data = unpack_item(item.data)
            assert_cartpole_nstep(data, replay.discount, replay.n_step)
            actor = int(data["actor"])
            counts[actor] = counts.get(actor, 0) + 1
            counts["shard", s] += 1
            if since is not None and actor == actor_id and float(data["insert_time"]) > since:
                counts["after"] += 1
    return counts
