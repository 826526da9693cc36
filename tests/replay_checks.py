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
