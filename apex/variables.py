"""Versioned parameters: the actors' side of the variable source."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex import compat
from apex.ports import wait_until_listening


class StopRequested(Exception):
    """The program was asked to stop while a node was still starting."""


class VariableClient:
    """Pulls (version, weights, info) from a variable source without stalling acting.

    The first pull blocks (retrying until `timeout` seconds) so an actor never
    acts on weights the learner does not have. Later pulls are asynchronous:
    every `update_period` env steps one request is issued; its result is swapped
    in at the first `maybe_update` after it arrives; one unanswered for
    `request_timeout` seconds is cancelled and asked again.
    """

    request_timeout = 30.0

    def __init__(
        self,
        source: Any,
        update_period: int,
        timeout: float = 600.0,
        should_stop: Callable[[], bool] | None = None,
    ):
        self._source = source
        self._period = int(update_period)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._future: concurrent.futures.Future | None = None
        self._last_request_step = 0
        self._requested_at = 0.0
        self.num_updates = 0
        self.changed = True
        deadline = time.time() + timeout
        address = compat.courier_address(source)
        if address is not None:  # the first call only once the source listens (apex.ports)
            wait_until_listening(address, deadline, should_stop)
        while True:
            try:
                self._apply(source.get_variables())
                break
            except Exception:
                if time.time() > deadline:
                    raise
                if should_stop is not None and should_stop():
                    raise StopRequested("stopped while waiting for the first parameters") from None
                time.sleep(0.5)

    def _apply(self, result: tuple[int, list[np.ndarray], dict]) -> None:
        version, weights, info = result
        self.version = int(version)
        self.weights = [np.asarray(w, np.float32) for w in weights]
        self.max_priority = float(info.get("max_priority", 0.0)) or None
        self.num_updates += 1
        self.changed = True

    def _request(self) -> concurrent.futures.Future:
        futures = getattr(self._source, "futures", None)
        if futures is not None:
            return futures.get_variables()
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="variable-client"
            )
        return self._executor.submit(self._source.get_variables)

    def maybe_update(self, env_steps: int) -> bool:
        """Swaps in arrived weights and issues a new request when due; True if swapped."""
        swapped = False
        if self._future is not None and self._future.done():
            try:
                self._apply(self._future.result())
                swapped = True
            except Exception:  # noqa: BLE001 - keep acting on the old weights; retry next period
                pass
            self._future = None
        elif (
            self._future is not None
            and time.monotonic() - self._requested_at > self.request_timeout
        ):
            # No answer for that long (a network partition can swallow a call):
            # give up on it, so the next period asks again on a live connection.
            self._future.cancel()
            self._future = None
        if self._future is None and env_steps - self._last_request_step >= self._period:
            self._future = self._request()
            self._requested_at = time.monotonic()
            self._last_request_step = env_steps
        return swapped

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
