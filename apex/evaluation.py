"""The evaluator: greedy episodes on the latest parameters (the online
weights, or their average with evaluation.weights='average').

Failures: a call to another node (the learner's get_variables, the
coordinator's counts and reports) that fails is `Unreachable` and is retried
(the learner may be starting or gone) up to MAX_UNREACHABLE times in a row;
anything the evaluation itself raises (an env, the network) propagates at
once: the node has failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apex import heartbeat as hb
from apex.agents import make_policy
from apex.agents.policy import ActingPolicy
from apex.config import ApexConfig
from apex.envs import DEFAULT_EVAL_EPISODE_CAP, env_spec, make_env, to_observation
from apex.metrics import MetricsWriter

MAX_UNREACHABLE = 30
"""Failed calls to other nodes in a row after which the evaluator gives up."""


class Unreachable(Exception):
    """A call from the evaluator to another node failed (that node may be starting,
    busy or gone): the evaluation is retried, not a failure of the evaluator."""


def _call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, a call to another node; any error it raises is `Unreachable`."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - courier raises many kinds: all mean "not now"
        raise Unreachable(f"{what} failed ({type(err).__name__}: {err})") from err


# The k-th evaluation (from 0) plays episode i from seed
# config.seed + EVAL_SEED_OFFSET + EVAL_SEED_STRIDE * k + i: seeds no actor uses.
EVAL_SEED_OFFSET = 10_000_000
EVAL_SEED_STRIDE = 1000


def evaluation_seed(config_seed: int, k: int) -> int:
    """The seed of the evaluator's k-th evaluation (from 0); its episode i plays
    from this seed + i (`evaluate`). Recorded as `evaluator/seed`."""
    return int(config_seed) + EVAL_SEED_OFFSET + EVAL_SEED_STRIDE * int(k)


def episode_cap(config: ApexConfig, env: Any) -> int:
    """Steps after which an evaluation episode is cut: evaluation.max_episode_steps,
    else the env's own time limit, else DEFAULT_EVAL_EPISODE_CAP."""
    cap = config.evaluation.max_episode_steps
    if cap is not None:
        return int(cap)
    limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    return int(limit) if limit else DEFAULT_EVAL_EPISODE_CAP


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
    the zero state and carries it along. An episode ends when its env says so
    or after `episode_cap` steps (its return so far counts). `should_stop` is
    asked every step (an Atari episode can last minutes): once it says stop,
    the episodes are abandoned and None is returned.
    """
    envs = [make_env(config.env) for _ in range(episodes)]
    rng = np.random.default_rng(seed)
    try:
        cap = episode_cap(config, envs[0])
        obs = np.stack([to_observation(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)])
        returns = np.zeros(episodes)
        steps = np.zeros(episodes, np.int64)
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
                steps[i] += 1
                obs[i] = to_observation(o)
                if term or trunc or steps[i] >= cap:
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
        self.failures = 0  # calls to other nodes that failed in a row
        self._policy = make_policy(config, env_spec(config.env))

    def evaluate_once(
        self, should_stop: Callable[[], bool] | None = None
    ) -> dict[str, float] | None:
        """One evaluation: its metrics row, or None if `should_stop` cut it short or
        the coordinator refused it (the stop was decided first: summary.json's
        evaluation is final, and no row is written after it).

        The row carries `evaluator/learner_steps` (the parameters' version) and
        `evaluator/env_steps` (the run's env steps when they were pulled).
        Raises `Unreachable` when a call to the learner or the coordinator failed.
        """
        ec = self._config.evaluation
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.EVALUATING)
        # The average is asked for by name; online weights as any variable source serves them.
        which = () if ec.weights == "online" else (ec.weights,)
        version, weights, _ = _call("learner.get_variables", self._source.get_variables, *which)
        env_steps = self._env_steps()
        t0 = time.time()
        self._policy.set_weights([np.asarray(w) for w in weights])
        returns = evaluate(
            self._config,
            self._policy,
            ec.episodes,
            ec.epsilon,
            seed=evaluation_seed(self._config.seed, self.evaluations),
            should_stop=should_stop,
        )
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.IDLE)
        if returns is None:
            return None
        mean = float(returns.mean())
        if self._coordinator is not None:
            accepted = _call(
                "coordinator.report_eval",
                self._coordinator.report_eval,
                mean,
                int(version),
                [float(x) for x in returns],
                env_steps,
            )
            if accepted is False:  # the stop is decided: this one is not the run's
                return None
        seed = evaluation_seed(self._config.seed, self.evaluations)
        self.evaluations += 1
        row = {
            "evaluator/return_mean": mean,
            "evaluator/return_min": float(returns.min()),
            "evaluator/return_max": float(returns.max()),
            "evaluator/param_version": int(version),
            "evaluator/learner_steps": int(version),
            "evaluator/env_steps": env_steps,
            "evaluator/seconds": time.time() - t0,
            "evaluator/evaluations": self.evaluations,
            "evaluator/seed": seed,
        }
        if self._metrics is not None:
            self._metrics.write(row)
        self._offer_best(mean, int(version), weights)
        return row

    def _env_steps(self) -> int | None:
        """The run's env steps now (the coordinator's count; None without one)."""
        if self._coordinator is None:
            return None
        counts = _call("coordinator.get_counts", self._coordinator.get_counts)
        return int(counts["env_steps"])

    def _offer_best(self, return_mean: float, version: int, weights: list) -> None:
        if self._best_sink is None:
            return
        if not self._best_asked:  # a resumed learner may hold a best already
            best = _call("learner.best", self._best_sink.best)
            self._best_known = None if best is None else float(best[0])
            self._best_asked = True
        if self._best_known is None or return_mean >= self._best_known:
            offered = [np.asarray(w) for w in weights]
            if _call(
                "learner.offer_best", self._best_sink.offer_best, return_mean, version, offered
            ):
                self._best_known = return_mean

    def close(self) -> None:
        """Closes the metrics files (and their TensorBoard writer thread)."""
        if self._metrics is not None:
            self._metrics.close()

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Evaluates every evaluation.period_seconds until `should_stop`. A failed
        call to another node is retried (MAX_UNREACHABLE in a row: RuntimeError);
        an error of the evaluation itself is raised at once."""
        period = self._config.evaluation.period_seconds
        while not should_stop():
            t0 = time.time()
            try:
                self.evaluate_once(should_stop)
            except Unreachable as err:  # the learner may be starting or gone
                if should_stop():
                    break
                self.failures += 1
                if self.failures >= MAX_UNREACHABLE:
                    raise RuntimeError(
                        f"{MAX_UNREACHABLE} evaluations in a row could not reach another "
                        f"node; last: {err}"
                    ) from err
                deadline = time.time() + 1.0
                while time.time() < deadline and not should_stop():
                    time.sleep(0.1)
                continue
            except Exception:
                if should_stop():  # the stop took away what it used: not a failure
                    break
                raise
            self.failures = 0
            remaining = period - (time.time() - t0)
            deadline = time.time() + max(0.0, remaining)
            while time.time() < deadline and not should_stop():
                time.sleep(min(0.1, max(0.0, deadline - time.time())))
