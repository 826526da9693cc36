"""The coordinator node: the control plane (apex.coordination.Coordinator) whose
methods are the RPCs every other node calls."""

from __future__ import annotations

import sys
import traceback

import launchpad as lp

from apex import STOP_WINDOW, ApexConfig, Coordinator, exception_text, fence, record_failure
from apex import heartbeat as hb
from launch.node_restarts import restart_grace_seconds
from launch.nodes.common import (
    node_metrics,
    node_should_stop,
    quiet_logs,
    set_local_coordinator,
)


class CoordinatorNode:
    """The control plane (apex.coordination.Coordinator); its methods are the RPCs
    every other node calls."""

    def __init__(
        self,
        config: ApexConfig,
        run_dir: str,
        start_time: float,
        replay,
        resume_state: dict | None = None,
        resume_from: str = "",
    ):
        quiet_logs()
        self._run_dir = run_dir
        try:
            self._setup(config, run_dir, start_time, replay, resume_state, resume_from)
        except Exception as err:
            # No coordinator to tell: the record names the exception once this
            # process is found dead (the launcher watches it).
            print(f"[apex] coordinator failed: {exception_text(err)}", file=sys.stderr, flush=True)
            record_failure(run_dir, "coordinator", err)
            raise
        set_local_coordinator(self._coordinator)

    def _setup(self, config, run_dir, start_time, replay, resume_state, resume_from) -> None:
        hb.register_stack_dump(run_dir, "coordinator")
        self._coordinator = Coordinator(
            config,
            run_dir,
            start_time,
            replay_client=replay,
            stop_program=lp.stop,
            metrics=node_metrics(config, run_dir, "coordinator", "coordinator/env_steps"),
            restart_grace=restart_grace_seconds(),  # its launcher restarts dead actors
            lease_seconds=fence.lease_seconds_from_env(),  # its launcher replaces lost actors
        )
        if resume_state:
            self._coordinator.restore(resume_state, resume_from)
        if run_dir and config.checkpoint.on_stop:
            self._coordinator.final_checkpoint_timeout = STOP_WINDOW.final_checkpoint_wait
        self._heartbeat = hb.Heartbeat(
            self._coordinator.heartbeats,
            "coordinator",
            config.logging.heartbeat_period_seconds,
            lambda: {"env_steps": self._coordinator.env_steps},
        )
        self._heartbeat.enter(hb.IDLE)

    def run(self) -> None:
        should_stop = node_should_stop()
        failed = False
        try:
            self._coordinator.run(should_stop)
        except Exception as err:
            failed = not self._stop_for(err)
            if failed:
                raise
        finally:
            set_local_coordinator(None)
            if not failed:  # else no 'stopped' beat: the launcher finds it dead, and why
                self._heartbeat.close()
            self._coordinator.close()

    def _stop_for(self, err: Exception) -> bool:
        """The coordinator's own loop raised `err`: records it, then stops the program
        in order with 'node failed' naming it. Returns whether that stop was made."""
        print(f"[apex] coordinator failed: {exception_text(err)}", file=sys.stderr, flush=True)
        traceback.print_exception(type(err), err, err.__traceback__)
        record_failure(self._run_dir, "coordinator", err)
        self._coordinator.report_failure("coordinator", exception_text(err))
        try:
            self._coordinator.stop_failed()
        except Exception:  # noqa: BLE001 - no orderly stop: the process dies of `err`
            return False
        return True

    # The control plane: every other node's calls.
    def heartbeat(self, beat):
        return self._coordinator.heartbeat(beat)

    def lost_nodes(self):
        return self._coordinator.lost_nodes()

    def fence_node(self, node):
        return self._coordinator.fence_node(node)

    def shard_moved(self, node, address) -> None:
        self._coordinator.shard_moved(node, address)

    def node_finished(self, node):
        return self._coordinator.node_finished(node)

    def forget_node(self, node) -> None:
        self._coordinator.forget_node(node)

    def actor_counts(self, actor_id):
        return self._coordinator.actor_counts(actor_id)

    def actor_items_inserted(self, actor_id):
        return self._coordinator.actor_items_inserted(actor_id)

    def actor_restart_count(self, actor_id):
        return self._coordinator.actor_restart_count(actor_id)

    def nodes_finished(self, prefix):
        return self._coordinator.nodes_finished(prefix)

    def write_metrics(self, component, step_key, row) -> None:
        self._coordinator.write_metrics(component, step_key, row)

    def report_actor(self, actor_id, env_steps, episodes, returns, start_time=None) -> None:
        self._coordinator.report_actor(actor_id, env_steps, episodes, returns, start_time)

    def report_learner(self, steps, first_step_time, row):
        return self._coordinator.report_learner(steps, first_step_time, row)

    def report_failure(self, node, message) -> None:
        self._coordinator.report_failure(node, message)

    def report_eval(self, return_mean, version, returns, env_steps=None) -> bool:
        return self._coordinator.report_eval(return_mean, version, returns, env_steps)

    def get_counts(self):
        return self._coordinator.get_counts()

    def checkpoint_state(self):
        return self._coordinator.checkpoint_state()

    def checkpoint_written(self, path, step, seconds, size, final=False) -> None:
        self._coordinator.checkpoint_written(path, step, seconds, size, final)

    def checkpoint_abandoned(self, step, error, final=False) -> None:
        self._coordinator.checkpoint_abandoned(step, error, final)

    def summary(self):
        return self._coordinator.summary()
