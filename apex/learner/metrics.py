"""The learner's metrics row: what its batches were (policy lag, sample age,
epsilon band shares) and the counters of the step, in one row per period."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from apex.exploration import epsilon_bands
from apex.learner.priority_updates import PriorityFeedback


class SampleStats:
    """Per-batch provenance, summarised and reset at each row.

    `add` takes a step's provenance ([B, 3]: version, insert_time, epsilon)
    and the sampled priorities; `write` adds learner/policy_lag_*_steps,
    learner/sample_age_*_seconds and, per epsilon band b (logging.epsilon_bands),
    learner/sample_share_band_<b> and learner/priority_share_band_<b>.
    """

    def __init__(self, band_edges: Sequence[float]):
        self._band_edges = tuple(band_edges)
        num_bands = len(self._band_edges) + 1
        self._band_counts = np.zeros(num_bands)
        self._band_priority = np.zeros(num_bands)
        self._lags: list[np.ndarray] = []
        self._ages: list[np.ndarray] = []

    def add(
        self,
        steps: int | np.ndarray,
        now: float,
        provenance: np.ndarray,
        sampled_priorities: np.ndarray,
    ) -> None:
        """One batch, trained on by step `steps` (1-based; or the step of each
        item, for the batches of several steps) at `now`."""
        version, insert_time, epsilon = provenance.T
        self._lags.append(steps - 1 - version)
        self._ages.append(now - insert_time)
        bands = epsilon_bands(epsilon, self._band_edges)
        num_bands = len(self._band_counts)
        self._band_counts += np.bincount(bands, minlength=num_bands)
        self._band_priority += np.bincount(bands, weights=sampled_priorities, minlength=num_bands)

    def write(self, row: dict[str, Any]) -> None:
        """The batches since the last row, into `row`; then starts over."""
        if self._lags:
            lags = np.concatenate(self._lags)
            ages = np.concatenate(self._ages)
            self._lags, self._ages = [], []
            row["learner/policy_lag_p50_steps"] = float(np.percentile(lags, 50))
            row["learner/policy_lag_p90_steps"] = float(np.percentile(lags, 90))
            row["learner/policy_lag_max_steps"] = float(lags.max())
            row["learner/sample_age_p50_seconds"] = float(np.percentile(ages, 50))
            row["learner/sample_age_p90_seconds"] = float(np.percentile(ages, 90))
            row["learner/sample_age_max_seconds"] = float(ages.max())
        if self._band_counts.sum() > 0:
            counts = self._band_counts / self._band_counts.sum()
            prio = self._band_priority / max(self._band_priority.sum(), 1e-12)
            for b in range(len(counts)):
                row[f"learner/sample_share_band_{b}"] = float(counts[b])
                row[f"learner/priority_share_band_{b}"] = float(prio[b])
            self._band_counts[:] = 0
            self._band_priority[:] = 0


def learner_row(
    steps: int,
    learning_rate: float,
    rate: float | None,
    last: dict[str, float],
    stats: SampleStats,
    priorities: PriorityFeedback,
    shard_batches: Sequence[int] | None,
) -> dict[str, Any]:
    """The learner's metrics row (keys in docs/metrics.md).

    Args:
      steps: SGD steps so far; learning_rate: Adam's at this step.
      rate: steps per second since the previous row (None: not measured).
      last: the last step's loss, grad_norm and q_mean.
      stats: the batches since the previous row (reset here).
      priorities: the priority updates' counters.
      shard_batches: S > 1: the batches each shard served; None with one server.
    """
    row: dict[str, Any] = {"learner/steps": steps, "learner/learning_rate": learning_rate}
    priorities.write_counts(row)
    if rate is not None:
        row["learner/steps_per_second"] = rate
    for k, v in last.items():
        row[f"learner/{k}"] = v
    stats.write(row)
    priorities.write_timing(row)
    if shard_batches is not None:
        priorities.write_shards(row, shard_batches)
    return row
