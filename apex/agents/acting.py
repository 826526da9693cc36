"""The actor role: a vector of epsilon-greedy envs, one batched forward pass per
step, items written to replay with their initial priorities. Each agent
subclasses `Actor` with its network (`network`), its accumulator, its `step`
and the TD error its initial priorities are made of (`priority_td`):
apex.agents.dqn.acting, apex.agents.r2d2.acting."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex import heartbeat as hb
from apex.agents.policy import ActingNetwork, ActingPolicy, LocalQ
from apex.config import ApexConfig
from apex.exploration import epsilon_bands, slot_epsilons
from apex.inference.client import RemoteQ
from apex.roles import ItemWriter, MetricsSink, Reporter, VariableSource
from apex.vector_envs import SlotEnvs, make_slots
from apex.vector_halves import SplitSlots


def initial_priorities(
    td: np.ndarray,
    policy: str,
    *,
    epsilon: float = 1e-3,
    constant: float = 1.0,
    max_seen: float | None = None,
) -> np.ndarray:
    """Priorities of new transitions under an insert policy.

    actor_td: |td| + epsilon (Ape-X: the actor's own n-step TD error);
    max_seen: the largest priority the learner has set so far (constant before any);
    constant: `constant` for every item.

    Example:
        >>> initial_priorities(np.array([-2.0, 0.5]), 'actor_td', epsilon=0.0).tolist()
        [2.0, 0.5]
    """
    td = np.asarray(td, np.float64)
    if policy == "actor_td":
        return np.abs(td) + epsilon
    if policy == "max_seen":
        return np.full(td.shape, max_seen if max_seen else constant)
    if policy == "constant":
        return np.full(td.shape, constant)
    raise ValueError(
        f"insert_priority={policy!r} is invalid: expected one of ['actor_td', 'max_seen', 'constant']"
    )


class Actor(abc.ABC):
    """Steps `envs_per_actor` envs and writes the agent's items with initial priorities.

    Subclasses supply `network` (the agent's ActingNetwork), `_make_accumulator`
    (steps -> items), `step` (one vector step of every env) and `priority_td`
    (an item's TD error for its initial priority); everything else (envs,
    exploration, parameters, initial priorities, writing, counters, reports,
    the run loop) is here.

    Args:
      config: the program config.
      actor_id: index of this actor (its slots are actor_id * E ... + E - 1).
      variable_source: a VariableSource (apex.roles): get_variables() ->
        (version, weights, info); a courier client of the learner, or the
        learner itself in tests.
      writer: an ItemWriter (apex.roles): write(batch, priorities).
      epsilons: the epsilon of each of its env slots, as its writer records
        them (the node computes them once for both); None: computed here.
      coordinator: optional Reporter (apex.roles) the actor reports counts to.
      metrics: optional MetricsSink (apex.roles) for the actor's rows.
      should_stop: checked while waiting for the first parameters.
      heartbeat: optional Heartbeat; its beats say when the actor is in an insert
        (Heartbeat.follow: the step itself only records when its inserts begin and end).
      inference: a handle of the inference node (actor.inference='central'):
        Q-values come from it and the actor holds no network (apex.inference).
    """

    network: ActingNetwork  # the agent's (its networks module's ACTING)

    def __init__(
        self,
        config: ApexConfig,
        actor_id: int,
        variable_source: VariableSource,
        writer: ItemWriter,
        coordinator: Reporter | None = None,
        metrics: MetricsSink | None = None,
        should_stop: Callable[[], bool] | None = None,
        heartbeat: hb.Heartbeat | None = None,
        inference: Any | None = None,
        epsilons: np.ndarray | None = None,
    ):
        self._config = config
        self.actor_id = actor_id
        e = config.actor.envs_per_actor
        self._num_envs = e
        # One vector env of E slots in env.vectorization's mode (apex.vector_envs):
        # same-step resets, observations of the stored type.
        # actor.overlap: two halves stepped in turn (apex.vector_halves).
        self._envs: SlotEnvs = (
            SplitSlots(config, e, faults=True)
            if config.actor.overlap
            else make_slots(config.env, e, faults=True)
        )
        if epsilons is None:
            epsilons = slot_epsilons(
                actor_id,
                e,
                config.actor.num_actors,
                config.actor.epsilon_base,
                config.actor.epsilon_alpha,
            )
        self._epsilons = np.asarray(epsilons)
        self._rng = np.random.default_rng(config.seed + 7919 * (actor_id + 1))
        self._acc = self._make_accumulator()
        self._writer = writer
        self._coordinator = coordinator
        self._metrics = metrics
        if inference is not None:
            self._qs: LocalQ | RemoteQ = RemoteQ(
                inference,
                lambda batch_size: self.network.initial_state(config, batch_size),
                should_stop=should_stop,
            )
        else:
            policy = ActingPolicy(self.network, config, self._envs.spec)
            self._qs = LocalQ(
                policy, variable_source, config.actor.params_update_period, should_stop
            )
        self._num_actions = self._envs.num_actions
        self._obs = self._envs.reset([config.seed + 1000 * actor_id + j for j in range(e)])
        self._q: np.ndarray | None = None
        self._q_version = -1
        self._episode_return = np.zeros(e)
        self.env_steps = 0
        self.episodes = 0
        self.items_written = 0
        self.restarts = 0  # set by the node that restarted this actor after a failure
        self.link: dict[str, float] = {}  # reconnects after partitions, what they cost (the node's)
        self._recent_returns: list[float] = []
        self._bands = epsilon_bands(self._epsilons, config.logging.epsilon_bands)
        self._band_returns: dict[int, list[float]] = {}
        self._start_time = time.time()
        # When the last insert began and ended (time.time()): the heartbeat reads them.
        self._insert_began = self._insert_ended = 0.0
        if heartbeat is not None:
            heartbeat.follow(self._insert_state)

    @property
    def epsilons(self) -> np.ndarray:
        return self._epsilons

    # Frames stored once: decided on the first step; the stream
    # positions of self._obs while it is on.
    _frames_on: bool | None = None
    _positions: np.ndarray | None = None

    def _stores_frames(self, spec: Any) -> bool:
        """Whether this agent's items store each frame once for envs of `spec`
        (the agent's rule in apex.replay.tables); none by default."""
        return False

    def _frame_writer(self) -> Any:
        """The writer if this actor stores each frame once, else None (the
        config's layout is packed, or the writer takes only whole items, e.g.
        a test's recording fake: ItemWriter.can_store_frames)."""
        if self._frames_on is None:
            self._frames_on = self._writer.can_store_frames and self._stores_frames(self._envs.spec)
        return self._writer if self._frames_on else None

    @abc.abstractmethod
    def _make_accumulator(self) -> Any:
        """The accumulator turning this actor's steps into items."""

    @abc.abstractmethod
    def step(self) -> int:
        """One vector step of every env; returns the number of items written."""

    @abc.abstractmethod
    def priority_td(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The TD error [N] of each item of `batch` (the accumulator's output),
        from the actor's own Q-values: what replay.insert_priority='actor_td' uses."""

    def _sync_weights(self) -> bool:
        """Loads newly arrived weights into the local network; True if it did
        (never with central inference: the server holds the parameters)."""
        return self._qs.sync(self.env_steps)

    def _forward(self, obs: np.ndarray, state=None) -> tuple[np.ndarray, Any, int]:
        """(Q-values, new recurrent state or None, the parameter version used)."""
        return self._qs(obs, state)

    def _write(self, batch: dict[str, np.ndarray]) -> int:
        """Writes the items of `batch` with their initial priorities; returns how many."""
        r = self._config.replay
        prios = initial_priorities(
            self.priority_td(batch),
            r.insert_priority,
            epsilon=r.priority_epsilon,
            constant=r.constant_priority,
            max_seen=self._qs.max_priority,
        )
        self._insert_began = time.time()
        self._writer.write(batch, prios)
        self._insert_ended = time.time()
        return len(prios)

    def _insert_state(self) -> tuple[str, float] | None:
        """(state, since) for the heartbeat's beats while the node is acting: in an
        insert (blocked while the rate limiter holds it) or acting since the last one
        ended; None before the first insert."""
        began, ended = self._insert_began, self._insert_ended
        if began > ended:
            cut = getattr(self._writer, "unreachable_since", None)
            if cut:  # the replay does not answer (apex.replay.writer)
                return hb.RECONNECTING, float(cut)
            return hb.INSERTING, began
        return (hb.ACTING, ended) if ended else None

    def _end_episodes(self, rewards: np.ndarray, ended) -> None:
        self._episode_return += rewards
        for j in ended:
            ret = float(self._episode_return[j])
            self._recent_returns.append(ret)
            self._band_returns.setdefault(int(self._bands[j]), []).append(ret)
            self._episode_return[j] = 0.0
            self.episodes += 1

    def run(self, should_stop: Callable[[], bool], max_steps: int | None = None) -> None:
        """Steps until `should_stop()` (checked every vector step) or max_steps env steps."""
        period = self._config.actor.report_period_seconds
        if not self.restarts:  # a restarted actor keeps its first start (rates stay right)
            self._start_time = time.time()
        last_report = time.time()
        last_steps = self.env_steps
        # The first report goes out with the first items written (the coordinator's
        # 'actor_<i> inserting' line), not a period later: an actor the rate limiter
        # holds from its first second on is still seen inserting.
        items_before = self.items_written
        while not should_stop():
            if max_steps is not None and self.env_steps >= max_steps:
                break
            self.step()
            now = time.time()
            first = items_before is not None and self.items_written > items_before
            if first or now - last_report >= period:
                items_before = None
                self._report(now, (self.env_steps - last_steps) / max(now - last_report, 1e-6))
                last_report, last_steps = now, self.env_steps
        self._report(time.time(), None)

    def _report(self, now: float, rate: float | None) -> None:
        returns = self._recent_returns
        self._recent_returns = []
        band_returns, self._band_returns = self._band_returns, {}
        row = {
            "actor/env_steps": self.env_steps,
            "actor/episodes": self.episodes,
            "actor/items_inserted": self.items_written,
            "actor/param_version": self._qs.version,
            "actor/param_updates": self._qs.num_updates,
            "actor/restarts": self.restarts,
        }
        row["actor/insert_seconds"] = self._writer.seconds_writing
        for key, value in self.link.items():  # reconnects after partitions (launch.nodes.actor)
            row[f"actor/{key}"] = value
        frames = self._writer.frames_written
        if frames:  # frames stored once: what each costs before Reverb's Snappy
            row["actor/frames_stored"] = frames
            stored = self._writer.frame_bytes
            if stored:
                row["actor/frame_bytes_compressed"] = stored
        if rate is not None:
            row["actor/env_steps_per_second"] = rate
        if returns:
            row["actor/episode_return_mean"] = float(np.mean(returns))
        for band, values in sorted(band_returns.items()):
            row[f"actor/episode_return_band_{band}"] = float(np.mean(values))
        if self._metrics is not None:
            self._metrics.write(row)
        if self._coordinator is not None:
            try:
                self._coordinator.futures.report_actor(
                    self.actor_id, self.env_steps, self.episodes, returns, self._start_time
                )
            except Exception:  # noqa: BLE001 - reporting is best effort; acting goes on
                pass

    def resume_counts(self, previous: Actor) -> None:
        """Continues the counters of the actor this one replaces after a failure."""
        self.env_steps = previous.env_steps
        self.episodes = previous.episodes
        self.items_written = previous.items_written
        self._start_time = previous._start_time

    def close(self) -> None:
        self._qs.close()
        self._envs.close()
