"""The actor node: one actor process, acting with restarts (apex.restart). It
touches no file of the run directory: what it reports goes to the coordinator."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

from apex import (
    ApexConfig,
    RemoteMetrics,
    Reporter,
    StopRequested,
    decide_restart,
    fence,
    lifecycle,
    slot_epsilons,
)
from apex import heartbeat as hb
from apex.agents import AgentBuilder
from apex.replay import ReplayStalled
from launch.node_env import GIVE_UP_ENV, PROCESS_RESTART_ENV, RESTARTED_ENV
from launch.nodes.common import node_heartbeat, node_should_stop, quiet_logs


def restarts_at_start(env: Mapping[str, str], coordinator: Any, actor_id: int) -> int:
    """The restarts an actor process starts counting from: its launcher's count
    of process deaths (launch.node_restarts, PROCESS_RESTART_ENV), or, for a
    process started again, one more than its predecessor's last beat counted if
    that is more: the predecessor may have restarted in-process before it died
    (the soak found actor/restarts going from 1 back to 1 after a process death)."""
    restarts = int(env.get(PROCESS_RESTART_ENV, "0") or 0)
    if env.get(RESTARTED_ENV) == "1":
        try:
            restarts = max(restarts, int(coordinator.actor_restart_count(actor_id)) + 1)
        except Exception:  # noqa: BLE001 - the coordinator may be gone: the process count
            pass
    return restarts


class ActorNode:
    """One actor process: acting with restarts (apex.restart). Touches no file of
    the run directory: everything it reports goes to the coordinator."""

    def __init__(
        self,
        config: ApexConfig,
        builder: AgentBuilder,
        actor_id: int,
        replay,
        learner,
        coordinator: Reporter,
        initial_counts: tuple[int, int] = (0, 0),
        inference=None,
    ):
        quiet_logs()
        if os.environ.get(lifecycle.NO_SHARED_FS_ENV) == "1" and config.run_dir:
            lifecycle.forbid_writes_under(config.run_dir)
            print(
                f"[apex] actor_{actor_id}: writes under the run directory are refused "
                f"({lifecycle.NO_SHARED_FS_ENV}=1)",
                flush=True,
            )
        hb.register_stack_dump(None, f"actor_{actor_id}")  # SIGUSR1: stacks to its log
        self._initial_counts = initial_counts  # (env steps, episodes) of a resumed run
        self._initial_items = 0  # items inserted: a process started again counts on
        self._config = config
        self._builder = builder
        self._actor_id = actor_id
        self._replay = replay
        self._learner = learner
        self._coordinator = coordinator
        self._inference = inference  # the inference node's handle (actor.inference='central')
        self._name = f"actor_{actor_id}"
        # Where its replay shard listens now, when the coordinator says it moved
        # (apex.coordination.moves); None: where it was launched.
        self._moved_to: str | None = None

    def run(self) -> None:
        c = self._config
        should_stop = node_should_stop()
        holder: dict = {}
        if os.environ.get(RESTARTED_ENV) == "1":  # a launcher started it again elsewhere
            try:
                counts = tuple(self._coordinator.actor_counts(self._actor_id))
                if counts[0] > self._initial_counts[0]:
                    self._initial_counts = (int(counts[0]), int(counts[1]))
                self._initial_items = int(self._coordinator.actor_items_inserted(self._actor_id))
            except Exception:  # noqa: BLE001 - the coordinator may be gone: start from ours
                pass

        give_up = os.environ.get(GIVE_UP_ENV)
        if give_up:  # its process died past actor.max_restarts (launch.node_restarts)
            self._give_up(give_up, should_stop)
            return
        # Restarts of this slot so far: its process's, then this process's own;
        # one count, as actor/restarts shows it.
        restarts = restarts_at_start(os.environ, self._coordinator, self._actor_id)

        def counters() -> dict:
            a = holder.get("actor")
            if a is None:
                return {"restarts": restarts} if restarts else {}
            out = {"env_steps": a.env_steps, "items_inserted": a.items_written}
            if a.restarts:
                out["restarts"] = a.restarts
            out.update(holder.get("link", {}))  # reconnects after partitions, what they cost
            return out

        # On Ray the actor inserts only while it holds a lease from the coordinator
        # (apex.fence): cut off past it, this copy ends itself, so
        # that the copy the launcher starts elsewhere is the only one inserting.
        seconds = fence.lease_seconds_from_env()
        lease = fence.Lease(self._name, seconds) if seconds > 0 else None

        def on_reply(sent: float, reply) -> None:
            if lease is not None:
                lease.on_reply(sent, reply)
            if isinstance(reply, dict) and reply.get("replay_address"):
                self._moved_to = str(reply["replay_address"])

        beat = node_heartbeat(c, self._coordinator, self._name, counters, on_reply)
        if lease is not None:
            lease.watch(lambda: None if should_stop() else fence.fence_now(lease.fence_line()))
            if not lease.wait_held(should_stop):  # no insert before the first grant
                beat.close()
                return
        holder["metrics"] = RemoteMetrics(self._coordinator, self._name, "actor/env_steps")
        backoff = c.actor.restart_backoff_seconds
        try:
            while not should_stop():
                beat.enter(hb.WAITING_PARAMS)
                started = time.time()
                try:
                    self._run_actor(should_stop, beat, holder, restarts)
                    return
                except StopRequested:
                    return
                except ReplayStalled as err:  # HELPER-31: a partition broke the stream
                    self._reconnect(err, holder, beat, should_stop)
                    continue
                except Exception as err:  # noqa: BLE001 - restart with fresh envs and parameters
                    if should_stop():  # the replay or learner went away first during shutdown
                        return
                    restarts += 1
                    decision = decide_restart(
                        restarts,
                        backoff,
                        time.time() - started,
                        c.actor.restart_backoff_seconds,
                        c.actor.max_restarts,
                    )
                    if not decision.restart:
                        message = (
                            f"failed {restarts} times (actor.max_restarts={c.actor.max_restarts}); "
                            f"last: {type(err).__name__}: {err}"
                        )
                        print(f"[apex] {self._name} {message}", file=sys.stderr, flush=True)
                        traceback.print_exc()
                        self._report_failure(message)
                        raise
                    print(
                        f"[apex] {self._name} failed ({type(err).__name__}: {err}); restart "
                        f"{restarts}/{c.actor.max_restarts} in {decision.wait:.1f} s with fresh "
                        "envs and parameters",
                        file=sys.stderr,
                        flush=True,
                    )
                    deadline = time.time() + decision.wait
                    while time.time() < deadline and not should_stop():
                        time.sleep(0.1)
                    backoff = decision.next_backoff
        finally:
            beat.close()

    def _reconnect(self, err: ReplayStalled, holder: dict, beat, should_stop) -> None:
        """After a partition broke the replay stream (the server answers again):
        a new client (a new stream) for the next life of the actor, which carries
        its counts on; not a failure, so no restart is counted. What it cost goes
        to the beats' counters (summary.json sums them: apex.coordination.partitions)."""
        beat.enter(hb.RECONNECTING)
        link = holder.setdefault("link", {})
        link["reconnects"] = link.get("reconnects", 0) + 1
        link["items_lost_in_flight"] = link.get("items_lost_in_flight", 0) + err.pending
        link["seconds_stalled"] = round(link.get("seconds_stalled", 0.0) + err.seconds, 1)
        print(
            f"[apex] {self._name}: {err}; reconnecting with a new writer "
            f"(reconnect {link['reconnects']}, counts carried on)",
            file=sys.stderr,
            flush=True,
        )
        address = self._moved_to if err.moved and self._moved_to else self._replay.server_address
        try:
            self._replay = type(self._replay)(address)
        except Exception:  # noqa: BLE001 - keep the old client: its channel reconnects by itself
            pass
        if holder.get("actor") is not None:
            holder["actor"].link = dict(link)

    def _shard_moved(self) -> bool:
        """Whether the coordinator said its shard listens elsewhere than its client dials."""
        moved = self._moved_to
        return moved is not None and moved != getattr(self._replay, "server_address", moved)

    def _give_up(self, message: str, should_stop) -> None:
        """The last start of a slot whose process died past actor.max_restarts:
        tells the coordinator (the program then stops in order, naming it)."""
        print(f"[apex] {self._name}: {message}", file=sys.stderr, flush=True)
        deadline = time.time() + 30.0
        while not should_stop():
            try:
                self._coordinator.report_failure(self._name, message)
                return
            except Exception:  # noqa: BLE001 - not reachable yet: try again until the deadline
                if time.time() > deadline:
                    return
                time.sleep(0.5)

    def _report_failure(self, message: str) -> None:
        try:
            self._coordinator.report_failure(self._name, message)
        except Exception:  # noqa: BLE001 - the coordinator may be gone; the node fails anyway
            pass

    def _run_actor(self, should_stop, beat, holder, restarts: int) -> None:
        """One life of the actor: a fresh writer, fresh envs, fresh parameters."""
        c = self._config
        e = c.actor.envs_per_actor
        eps = slot_epsilons(
            self._actor_id, e, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha
        )
        with self._builder.make_writer(
            self._replay, self._actor_id, eps, self._actor_id * e, should_stop
        ) as writer:
            # Its stream counts as broken only once the table took this many
            # writers' fair shares of other items while none of its own came in.
            writer.fellow_writers = int(c.actor.num_actors)
            writer.address_moved = self._shard_moved
            actor = self._builder.make_actor(
                c,
                self._actor_id,
                self._learner,
                writer,
                coordinator=self._coordinator,
                metrics=holder["metrics"],
                should_stop=should_stop,
                heartbeat=beat,
                inference=self._inference,
                epsilons=eps,  # the writer's: computed once, above
            )
            previous = holder.get("actor")
            if previous is not None:
                actor.resume_counts(previous)
            else:
                actor.env_steps, actor.episodes = self._initial_counts
                actor.items_written = self._initial_items
            actor.restarts = restarts
            actor.link = dict(holder.get("link", {}))
            holder["actor"] = actor
            beat.enter(hb.ACTING)
            try:
                actor.run(should_stop)
            finally:
                actor.close()
