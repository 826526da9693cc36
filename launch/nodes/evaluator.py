"""The evaluator node: greedy evaluation episodes on the latest parameters, in the
coordinator's process."""

from __future__ import annotations

from apex import ApexConfig, Evaluator, Reporter
from launch.nodes.common import (
    node_heartbeat,
    node_metrics,
    node_should_stop,
    quiet_logs,
    report_node_failure,
)


class EvaluatorNode:
    """Greedy evaluation episodes on the latest parameters (with the coordinator).

    It shares the coordinator's process: an exception in its constructor or
    its evaluations is reported to the coordinator (and recorded under the run
    directory), and the node ends without taking the process down; the
    coordinator then stops the program in order with 'node failed'.
    """

    def __init__(
        self, config: ApexConfig, learner, coordinator: Reporter, run_dir: str, model_store=None
    ):
        quiet_logs()
        # With a model store, parameters come from it and the best goes to it.
        source = learner if model_store is None else model_store
        self._coordinator = coordinator
        self._run_dir = run_dir
        self._evaluator: Evaluator | None = None
        self._failed: Exception | None = None  # the constructor's, reported by run()
        self._heartbeat = node_heartbeat(config, coordinator, "evaluator", self._counters)
        metrics = node_metrics(config, run_dir, "evaluator", "evaluator/evaluations")
        try:
            self._evaluator = Evaluator(
                config,
                source,
                coordinator=coordinator,
                best_sink=source,
                metrics=metrics,
                heartbeat=self._heartbeat,
            )
        except Exception as err:  # noqa: BLE001 - reported by run(): this process is the coordinator's
            metrics.close()
            self._failed = err

    def _counters(self) -> dict:
        return {"evaluations": self._evaluator.evaluations} if self._evaluator else {}

    def run(self) -> None:
        should_stop = node_should_stop()
        try:
            if self._failed is not None:
                raise self._failed
            assert self._evaluator is not None
            self._evaluator.run(should_stop)
        except Exception as err:
            if should_stop():
                return
            if not report_node_failure(
                self._coordinator, "evaluator", err, self._run_dir, should_stop
            ):
                raise
            # The coordinator has it and stops the program in order.
        finally:
            self._heartbeat.close()
            if self._evaluator is not None:
                self._evaluator.close()
