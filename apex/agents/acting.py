"""The actor role: a vector of epsilon-greedy envs, one batched forward pass per
step, items written to replay. Each agent subclasses `Actor` with its
accumulator and its `step` (apex.agents.dqn.acting, apex.agents.r2d2.acting)."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex import heartbeat as hb
from apex.agents import get_builder
from apex.config import ApexConfig
from apex.envs import make_env, spec_of, to_observation
from apex.exploration import epsilon_bands, slot_epsilons
from apex.inference import LocalQ, RemoteQ
from apex.replay.priorities import initial_priorities
from apex.roles import ItemWriter, MetricsSink, Reporter, VariableSource


class Actor(abc.ABC):
    """Steps `envs_per_actor` envs and writes the agent's items with initial priorities.

    Subclasses supply `_make_accumulator` (steps -> items) and `step` (one
    vector step of every env); everything else (envs, exploration, parameters,
    writing, counters, reports, the run loop) is here.

    Args:
      config: the program config.
      actor_id: index of this actor (its slots are actor_id * E ... + E - 1).
      variable_source: a VariableSource (apex.roles): get_variables() ->
        (version, weights, info); a courier client of the learner, or the
        learner itself in tests.
      writer: an ItemWriter (apex.roles): write(batch, priorities).
      coordinator: optional Reporter (apex.roles) the actor reports counts to.
      metrics: optional MetricsSink (apex.roles) for the actor's rows.
      should_stop: checked while waiting for the first parameters.
      heartbeat: optional Heartbeat; the actor marks the time it spends in inserts.
      inference: a handle of the inference node (actor.inference='central'):
        Q-values come from it and the actor holds no network (apex.inference).
    """

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
    ):
        self._config = config
        self._heartbeat = heartbeat
        self.actor_id = actor_id
        e = config.actor.envs_per_actor
        self._num_envs = e
        self._envs = [make_env(config.env, faults=True) for _ in range(e)]
        self._epsilons = slot_epsilons(
            actor_id,
            e,
            config.actor.num_actors,
            config.actor.epsilon_base,
            config.actor.epsilon_alpha,
        )
        self._rng = np.random.default_rng(config.seed + 7919 * (actor_id + 1))
        self._acc = self._make_accumulator()
        self._writer = writer
        self._coordinator = coordinator
        self._metrics = metrics
        if inference is not None:
            self._qs: LocalQ | RemoteQ = RemoteQ(
                inference,
                get_builder(config).recurrent,
                config.r2d2.lstm_size,
                should_stop=should_stop,
            )
        else:
            self._qs = LocalQ(config, spec_of(self._envs[0]), variable_source, should_stop)
        self._num_actions = self._envs[0].action_space.n
        obs = []
        for j, env in enumerate(self._envs):
            o, _ = env.reset(seed=config.seed + 1000 * actor_id + j)
            env.action_space.seed(config.seed + 1000 * actor_id + j)
            obs.append(to_observation(o))
        self._obs = np.stack(obs)
        self._q: np.ndarray | None = None
        self._q_version = -1
        self._episode_return = np.zeros(e)
        self.env_steps = 0
        self.episodes = 0
        self.items_written = 0
        self.restarts = 0  # set by the node that restarted this actor after a failure
        self._recent_returns: list[float] = []
        self._bands = epsilon_bands(self._epsilons, config.logging.epsilon_bands)
        self._band_returns: dict[int, list[float]] = {}
        self._start_time = time.time()

    @property
    def epsilons(self) -> np.ndarray:
        return self._epsilons

    # Frames stored once (issue 16): decided on the first step; the stream
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
        a test's recording fake)."""
        if self._frames_on is None:
            from apex.envs import spec_of

            self._frames_on = hasattr(self._writer, "start_frames") and self._stores_frames(
                spec_of(self._envs[0])
            )
        return self._writer if self._frames_on else None

    @abc.abstractmethod
    def _make_accumulator(self) -> Any:
        """The accumulator turning this actor's steps into items."""

    @abc.abstractmethod
    def step(self) -> int:
        """One vector step of every env; returns the number of items written."""

    def _sync_weights(self) -> bool:
        """Loads newly arrived weights into the local network; True if it did
        (never with central inference: the server holds the parameters)."""
        return self._qs.sync(self.env_steps)

    def _forward(self, obs: np.ndarray, state=None) -> tuple[np.ndarray, Any, int]:
        """(Q-values, new recurrent state or None, the parameter version used)."""
        return self._qs(obs, state)

    def _write(self, batch: dict[str, np.ndarray], td: np.ndarray) -> int:
        r = self._config.replay
        prios = initial_priorities(
            td,
            r.insert_priority,
            epsilon=r.priority_epsilon,
            constant=r.constant_priority,
            max_seen=self._qs.max_priority,
        )
        beat = self._heartbeat
        if beat is not None:
            beat.enter(hb.INSERTING)
        self._writer.write(batch, prios)
        if beat is not None:
            beat.enter(hb.ACTING)
        return len(prios)

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
        while not should_stop():
            if max_steps is not None and self.env_steps >= max_steps:
                break
            self.step()
            now = time.time()
            if now - last_report >= period:
                self._report(now, (self.env_steps - last_steps) / (now - last_report))
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
        writing = getattr(self._writer, "seconds_writing", None)
        if writing is not None:
            row["actor/insert_seconds"] = writing
        frames = getattr(self._writer, "frames_written", 0)
        if frames:  # frames stored once (issue 16): what each costs before Reverb's Snappy
            row["actor/frames_stored"] = frames
            stored = getattr(self._writer, "frame_bytes", 0)
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
        for env in self._envs:
            env.close()
