"""The model store node (model_store.enabled): the parameter versions the learner
pushes, served to the actors and the evaluator. Public methods are courier RPCs."""

from __future__ import annotations

import time

import launchpad as lp

from apex import STOP_WINDOW, ApexConfig, ModelStore, RemoteMetrics, Reporter, checkpointing
from apex import heartbeat as hb
from launch.nodes.common import node_heartbeat, node_should_stop, quiet_logs


class ModelStoreNode:
    """The model store (model_store.enabled, apex.model_store): a process of its
    own that holds the versions the learner pushes and serves them to the actors
    and the evaluator; it keeps the best evaluated parameters. It beats to the
    coordinator (its death stops the program, 'node failed'), writes its figures
    through the coordinator (it needs no run directory), and at a stop serves
    until the learner has written its final checkpoint (which holds the store's
    best record). A resumed store starts from the checkpoint's record and newest
    version. Public methods are courier RPCs."""

    def __init__(self, config: ApexConfig, coordinator: Reporter, resume_from: str = ""):
        quiet_logs()
        self._config = config
        self._coordinator = coordinator
        self._store = ModelStore(keep_last=config.model_store.keep_last)
        if resume_from:
            self._store.set_state(checkpointing.load(resume_from, verify_checksums=False).learner)
        self._metrics = RemoteMetrics(coordinator, "model_store", "model_store/newest_version")
        self._heartbeat = node_heartbeat(config, coordinator, "model_store", self._counters)

    def _counters(self) -> dict:
        newest = self._store.newest_version()
        return {"version": -1 if newest is None else newest}

    # ------------------------------------------------------------------ RPCs
    def push(self, version: int, weights, info=None) -> bool:
        return self._store.push(version, weights, info)

    def get_variables(self):
        return self._store.get_variables()

    def get_version(self, version: int):
        return self._store.get_version(version)

    def offer_best(self, return_mean: float, version: int, weights=None) -> bool:
        return self._store.offer_best(return_mean, version, weights)

    def best(self):
        return self._store.best()

    def best_variables(self):
        return self._store.best_variables()

    def get_state(self) -> dict:
        return self._store.get_state()

    def stats(self) -> dict:
        return self._store.stats()

    def close(self) -> None:
        """Stops the heartbeat; `run` does it at its end (for a store made by hand)."""
        self._heartbeat.close()

    # -------------------------------------------------------------------- run
    def run(self) -> None:
        should_stop = node_should_stop()
        period = self._config.logging.metrics_period_seconds
        event = lp.stop_event()
        try:
            self._heartbeat.enter(hb.SERVING)
            while not should_stop():
                event.wait(period)
                self._metrics.write(self._store.stats())
            # Serve until the learner's final checkpoint (it asks for the best record).
            deadline = time.time() + STOP_WINDOW.final_checkpoint_wait
            while time.time() < deadline:
                try:
                    if self._coordinator.node_finished("learner") is not False:
                        break
                except Exception:  # noqa: BLE001 - the coordinator is gone: so is the run
                    break
                time.sleep(0.2)
        finally:
            self._heartbeat.close()
