"""The evaluator: greedy episodes on the latest parameters."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex import heartbeat as hb
from apex.agents.policy import ActingPolicy
from apex.config import ApexConfig
from apex.envs import env_spec, make_env, to_observation
from apex.metrics import MetricsWriter


def evaluate(
    config: ApexConfig,
    policy: ActingPolicy,
    episodes: int,
    epsilon: float,
    seed: int,
    should_stop: Callable[[], bool] | None = None,
) -> np.ndarray | None:
    """Returns of `episodes` episodes run side by side with one batched forward pass per step.

    `policy` has its weights set; a recurrent policy starts every episode from
    the zero state and carries it along. `should_stop` is asked every step (an
    Atari episode can last minutes): once it says stop, the episodes are
    abandoned and None is returned.
    """
    envs = [make_env(config.env) for _ in range(episodes)]
    rng = np.random.default_rng(seed)
    try:
        obs = np.stack([to_observation(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)])
        returns = np.zeros(episodes)
        live = np.ones(episodes, bool)
        n_actions = envs[0].action_space.n
        state = policy.initial_state(episodes)
        while live.any():
            if should_stop is not None and should_stop():
                return None
            idx = np.flatnonzero(live)
            if state is None:
                q, _ = policy(obs[idx])
            else:
                q, (h, c) = policy(obs[idx], (state[0][idx], state[1][idx]))
                state[0][idx], state[1][idx] = h, c
            actions = q.argmax(axis=1)
            if epsilon > 0:
                explore = rng.random(len(idx)) < epsilon
                actions = np.where(explore, rng.integers(0, n_actions, len(idx)), actions)
            for a, i in zip(actions, idx):
                o, r, term, trunc, _ = envs[i].step(int(a))
                returns[i] += r
                obs[i] = to_observation(o)
                if term or trunc:
                    live[i] = False
        return returns
    finally:
        for env in envs:
            env.close()


class Evaluator:
    """Every evaluation.period_seconds: pull the latest weights, run greedy episodes, report."""

    def __init__(
        self,
        config: ApexConfig,
        variable_source: Any,
        coordinator: Any = None,
        metrics: MetricsWriter | None = None,
        heartbeat: hb.Heartbeat | None = None,
        best_sink: Any = None,
    ):
        """`best_sink` (the learner) keeps the best evaluated parameters: it is
        offered the weights of every evaluation at least as good as its best."""
        self._config = config
        self._best_sink = best_sink
        self._best_known: float | None = None
        self._best_asked = False
        self._heartbeat = heartbeat
        self._source = variable_source
        self._coordinator = coordinator
        self._metrics = metrics
        self.evaluations = 0
        self.failures = 0
        self._policy = ActingPolicy(config, env_spec(config.env))

    def evaluate_once(
        self, should_stop: Callable[[], bool] | None = None
    ) -> dict[str, float] | None:
        """One evaluation: its metrics row, or None if `should_stop` cut it short."""
        ec = self._config.evaluation
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.EVALUATING)
        version, weights, _ = self._source.get_variables()
        t0 = time.time()
        self._policy.set_weights([np.asarray(w) for w in weights])
        returns = evaluate(
            self._config,
            self._policy,
            ec.episodes,
            ec.epsilon,
            seed=self._config.seed + 10_000_000 + 1000 * self.evaluations,
            should_stop=should_stop,
        )
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.IDLE)
        if returns is None:
            return None
        self.evaluations += 1
        row = {
            "evaluator/return_mean": float(returns.mean()),
            "evaluator/return_min": float(returns.min()),
            "evaluator/return_max": float(returns.max()),
            "evaluator/param_version": int(version),
            "evaluator/seconds": time.time() - t0,
            "evaluator/evaluations": self.evaluations,
        }
        if self._metrics is not None:
            self._metrics.write(row)
        self._offer_best(float(returns.mean()), int(version), weights)
        if self._coordinator is not None:
            self._coordinator.report_eval(
                float(returns.mean()), int(version), [float(x) for x in returns]
            )
        return row

    def _offer_best(self, return_mean: float, version: int, weights: list) -> None:
        if self._best_sink is None:
            return
        if not self._best_asked:  # a resumed learner may hold a best already
            best = self._best_sink.best()
            self._best_known = None if best is None else float(best[0])
            self._best_asked = True
        if self._best_known is None or return_mean >= self._best_known:
            if self._best_sink.offer_best(return_mean, version, [np.asarray(w) for w in weights]):
                self._best_known = return_mean

    def close(self) -> None:
        """Closes the metrics files (and their TensorBoard writer thread)."""
        if self._metrics is not None:
            self._metrics.close()

    def run(self, should_stop: Callable[[], bool]) -> None:
        period = self._config.evaluation.period_seconds
        while not should_stop():
            t0 = time.time()
            try:
                self.evaluate_once(should_stop)
            except Exception as err:  # noqa: BLE001 - the learner may be starting or gone
                if should_stop():
                    break
                self.failures += 1
                if self.failures > 30:
                    raise RuntimeError(f"evaluator: 30 failed evaluations, last: {err}") from err
                time.sleep(1.0)
                continue
            remaining = period - (time.time() - t0)
            deadline = time.time() + max(0.0, remaining)
            while time.time() < deadline and not should_stop():
                time.sleep(min(0.1, max(0.0, deadline - time.time())))
