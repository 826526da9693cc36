"""The central inference node (actor.inference='central'): batched `infer` calls
on the newest parameters of the learner in its process."""

from __future__ import annotations

import time

import launchpad as lp

from apex import (
    STOP_WINDOW,
    ApexConfig,
    BatchingServer,
    EnvSpec,
    InferenceService,
    Learner,
    Reporter,
    follow_learner,
)
from apex.agents import make_policy
from launch.nodes.common import (
    local_learner,
    node_metrics,
    node_should_stop,
    quiet_logs,
    report_node_failure,
)


class InferenceNode(InferenceService):
    """The central inference server (actor.inference='central', apex.inference):
    in the learner's process, it reads the learner's newest parameters there
    every `inference.params_period_seconds` and answers the actors' `infer`
    calls in batches. Its figures go to RUN_DIR/metrics/inference.jsonl every
    `logging.metrics_period_seconds`. If it fails, it says so to the
    coordinator, which stops the program in order ('node failed'); actors
    waiting on it get an error, never a hang."""

    # Seconds the node waits for the learner of its process to exist.
    LEARNER_WAIT = 600.0

    def __init__(self, config: ApexConfig, spec: EnvSpec, coordinator: Reporter, run_dir: str):
        quiet_logs()
        self._config = config
        self._coordinator = coordinator
        self._run_dir = run_dir
        ic = config.inference
        server = BatchingServer(
            make_policy(config, spec),
            ic.max_batch,
            ic.max_wait_ms / 1000.0,
            expected_clients=config.actor.num_actors,
            pad=config.learner.torso != "mlp",
            obs_shape=tuple(spec.observation_shape),
        )
        super().__init__(server, timeout=ic.call_timeout_seconds)  # infer, version, stats
        self._metrics = node_metrics(config, run_dir, "inference", "inference/requests")

    # -------------------------------------------------------------------- run
    def run(self) -> None:
        should_stop = node_should_stop()
        try:
            learner = self._wait_for_learner(should_stop)
            if learner is None:
                return
            self._serve(learner, should_stop)
            # The stop: serve until every actor is out of its loop (bounded), so
            # no actor's last step meets a closed server.
            deadline = time.time() + STOP_WINDOW.actor_drain
            while time.time() < deadline and not self._actors_finished():
                time.sleep(0.05)
        except Exception as err:
            if should_stop():
                return
            if not report_node_failure(
                self._coordinator, "inference", err, self._run_dir, should_stop
            ):
                raise
        finally:
            self._server.close()
            self._metrics.close()

    def _actors_finished(self) -> bool:
        try:
            return bool(self._coordinator.nodes_finished("actor_"))
        except Exception:  # noqa: BLE001 - no coordinator to ask: stop serving
            return True

    def _wait_for_learner(self, should_stop) -> Learner | None:
        deadline = time.time() + self.LEARNER_WAIT
        while not should_stop():
            learner = local_learner()
            if learner is not None:
                return learner
            if time.time() > deadline:
                raise RuntimeError(
                    "no learner in this process: the inference node runs in the learner's "
                    "process (launch/program.py colocates them)"
                )
            time.sleep(0.05)
        return None

    def _serve(self, learner: Learner, should_stop) -> None:
        ic = self._config.inference
        follow_learner(
            self._server,
            learner,
            should_stop,
            lp.stop_event().wait,
            ic.params_period_seconds,
            self._config.logging.metrics_period_seconds,
            self._metrics.write,
        )
