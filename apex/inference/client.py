"""The actor's side of central inference (actor.inference='central'): `RemoteQ`,
the Q-value source of an env stepper that holds no network.

Actors send their E observations (and, for a recurrent agent, their E
recurrent states) to the inference node (apex.inference.server) and get back
the Q-values, the new states and the parameter version the server used.
An actor with its own network uses apex.agents.policy.LocalQ instead; both
answer `q, new_state, version = source(obs, state)`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex.variables import StopRequested

State = tuple[np.ndarray, np.ndarray]


class RemoteQ:
    """An env stepper's Q-values from the inference node (actor.inference='central').

    The first call waits (retrying, as a variable client's first pull does)
    until the server has parameters; later calls fail after the handle's call
    timeout instead of hanging on a dead server.

    Args:
      server: the inference node's handle (`infer`, `version`:
        apex.inference.server.InferenceService, or a courier client of it).
      initial_state: batch_size -> the state an episode starts from (None for
        a feed-forward agent): the agent's (apex.agents.policy.ActingNetwork).
      should_stop: checked while waiting for the server's first parameters.
      timeout: seconds to wait for them.
    """

    def __init__(
        self,
        server: Any,
        initial_state: Callable[[int], State | None],
        should_stop: Callable[[], bool] | None = None,
        timeout: float = 600.0,
    ):
        self._server = server
        self._initial_state = initial_state
        self.version = -1
        self.max_priority: float | None = None
        self.num_updates = 0
        deadline = time.time() + timeout
        while True:
            try:
                if int(server.version()) >= 0:
                    break
            except Exception:  # noqa: BLE001 - not up yet: retry until the deadline
                if time.time() > deadline:
                    raise
            if time.time() > deadline:
                raise TimeoutError(f"the inference server had no parameters within {timeout:.0f} s")
            if should_stop is not None and should_stop():
                raise StopRequested("stopped while waiting for the inference server")
            time.sleep(0.2)

    def sync(self, env_steps: int) -> bool:
        return False  # the server holds the parameters

    def initial_state(self, batch_size: int) -> State | None:
        return self._initial_state(batch_size)

    def __call__(self, obs: np.ndarray, state: State | None = None):
        """(q, new state, version) of a batch of observations."""
        if state is None:
            q, h, c, version, max_priority = self._server.infer(np.asarray(obs))
            new_state = None
        else:
            q, h, c, version, max_priority = self._server.infer(
                np.asarray(obs), np.asarray(state[0]), np.asarray(state[1])
            )
            new_state = (np.asarray(h), np.asarray(c))
        version = int(version)
        if version != self.version:
            self.num_updates += 1
            self.version = version
        self.max_priority = float(max_priority) or None
        return np.asarray(q), new_state, version

    def close(self) -> None:
        pass
