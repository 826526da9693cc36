"""The replay node: a Reverb server on its configured port that outlives the stop
request until the learner has finished (lp.ReverbNode, made graceful)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import launchpad as lp

from apex import STOP_WINDOW, fence
from apex import heartbeat as hb
from launch.nodes.common import node_should_stop, quiet_logs, report_node_failure, stopping


class PinnedPortAddress(lp.Address):
    """An lp.Address with a fixed port (replay.port): whatever builder a launch
    binds picks the host (localhost under local_mp, the host's IP on Ray), the
    port stays the configured one."""

    pinned_port: int = 0

    def bind(self, address_builder) -> None:
        super().bind(_PinnedPortBuilder(address_builder, self.pinned_port))


class _PinnedPortBuilder:
    def __init__(self, inner, port: int):
        self.inner = inner
        self.port = int(port)

    def build(self) -> str:
        return f"{self.inner.build().rsplit(':', 1)[0]}:{self.port}"


class GracefulReverbNode(lp.ReverbNode):
    """lp.ReverbNode whose server outlives the stop request: by the grace period,
    and until the coordinator says the learner has finished (its drain that
    releases the actors and its final checkpoint), at most
    STOP_WINDOW.final_checkpoint_wait.

    Args:
      tables_fn, checkpoint_ctor: as lp.ReverbNode's.
      port: replay.port (+ the shard's index): the server listens there.
      name: the node's name in failures and beats ('replay', or a shard's
        'replay_<s>', apex.replay.shards.shard_name).
      heartbeat_period: > 0 for a server in a process of its own (a replay
        shard): it beats to the coordinator as `name` every that many seconds,
        so its death stops the program ('node failed' naming it), and it
        watches the launcher like every node process. On Ray it also holds a
        lease as an actor does (apex.fence): cut off past it, this copy ends
        itself, and the launcher starts the shard again elsewhere
        (apex.coordination.moves). 0: no beats (the one replay server, or a
        shard in the learner's process), as before shards.
    """

    def __init__(
        self,
        tables_fn,
        checkpoint_ctor=None,
        port: int | None = None,
        name: str = "replay",
        heartbeat_period: float = 0.0,
    ):
        super().__init__(tables_fn, checkpoint_ctor)
        self._coordinator_handle: Any = None
        self._name = name
        self._heartbeat_period = float(heartbeat_period)
        self._coordinator: Any = None  # the dereferenced handle, once running
        if port is not None:  # replay.port: the server listens there, clients dial it
            address = self.reverb_address
            address.__class__ = PinnedPortAddress
            address.pinned_port = int(port)

    def _beat(self, should_stop: Callable[[], bool]) -> hb.Heartbeat:
        # Held by the node: a courier client shuts its channel down when collected,
        # and the beat holds only its `futures` (which does not keep it alive).
        self._coordinator = coordinator = self._coordinator_handle.dereference()
        futures = getattr(coordinator, "futures", None)
        seconds = fence.lease_seconds_from_env()  # set by a launcher that replaces lost nodes
        lease = fence.Lease(self._name, seconds) if seconds > 0 else None
        beat = hb.Heartbeat(
            (futures or coordinator).heartbeat,
            self._name,
            self._heartbeat_period,
            on_reply=lease.on_reply if lease is not None else None,
        )
        if lease is not None:  # serving needs no grant first: nothing here inserts
            # `should_stop`, not `stopping()`: the watchdog's own thread has no
            # Launchpad worker manager (stopping() is False there, and a stop
            # past the lease would fence the shard under the learner's final
            # checkpoint: its beats end at the stop request).
            lease.watch(lambda: None if should_stop() else fence.fence_now(lease.fence_line()))
        beat.enter(hb.IDLE)
        return beat

    def wait_for_learner_through(self, coordinator_handle: Any) -> None:
        """At a stop, ask the coordinator (its handle) whether the learner has finished.

        Set after the node is made: the coordinator's node takes this node's
        handle, so it cannot exist first. The handle is dereferenced in `run`.
        """
        self._coordinator_handle = coordinator_handle

    def run(self) -> None:
        beat = None
        should_stop = stopping
        if self._heartbeat_period > 0 and self._coordinator_handle is not None:
            quiet_logs()  # a shard's own process: no absl INFO lines (port picking)
            # Its own process: the stop window, the launcher watchdog.
            should_stop = node_should_stop()
            beat = self._beat(should_stop)
        try:
            super().run()  # returns when the program is asked to stop
        except Exception as err:
            if not should_stop():  # the tables, the checkpointer or the server failed
                handle = self._coordinator_handle
                report_node_failure(handle.dereference() if handle else None, self._name, err)
            raise
        finally:
            if beat is not None:
                # 'stopped' at the stop request: the server still serves the drain
                # and the final checkpoint, but its end is no death to report.
                beat.close()
        time.sleep(STOP_WINDOW.replay_grace + 0.5)
        if self._coordinator_handle is None:
            return
        coordinator = self._coordinator or self._coordinator_handle.dereference()
        deadline = time.time() + STOP_WINDOW.final_checkpoint_wait
        while time.time() < deadline:
            try:
                if coordinator.node_finished("learner") is not False:
                    return
            except Exception:  # noqa: BLE001 - the coordinator is gone: so is the run
                return
            time.sleep(0.2)
