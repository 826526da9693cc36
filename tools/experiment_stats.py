"""The estimators of rliable (Agarwal et al., 2021, "Deep RL at the edge of the
statistical precipice"), in numpy alone: the interquartile mean, stratified
bootstrap confidence intervals (percentile method) and the probability of
improvement.

rliable itself installs beside the pinned stack, but brings scipy, pandas,
statsmodels, arch and seaborn for what is ~80 lines here; its estimators are
reproduced with its semantics:

- IQM: the mean of the middle 50% of the runs, scipy.stats.trim_mean(x, 0.25)
  (int(0.25 * n) runs cut from each end of the sorted sample);
- stratified bootstrap: each resample draws, for every stratum (a task: one
  env), as many runs as it has, with replacement, from that stratum only; the
  statistic is computed on the union;
- percentile interval: the alpha/2 and 1 - alpha/2 quantiles of the
  resampled statistic;
- probability of improvement P(X > Y): per stratum, the Mann-Whitney U
  statistic over all pairs of runs (a tie counts 1/2) divided by n_x * n_y,
  averaged over the strata.

tests/test_experiment_stats.py checks them against a normal sample's analytic
interval, hand computations and a hand case of the probability of improvement.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

Strata = Sequence[Sequence[float]]


def iqm(x, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean along `axis` (scipy.stats.trim_mean(x, 0.25) semantics)."""
    a = np.sort(np.asarray(x, dtype=float), axis=axis)
    n = a.shape[axis]
    if n == 0:
        raise ValueError("iqm of an empty sample")
    cut = int(0.25 * n)
    kept = np.take(a, np.arange(cut, n - cut), axis=axis)
    return kept.mean(axis=axis)


def median(x, axis: int = -1):
    return np.median(np.asarray(x, dtype=float), axis=axis)


def mean(x, axis: int = -1):
    return np.mean(np.asarray(x, dtype=float), axis=axis)


ESTIMATORS: dict[str, Callable] = {"median": median, "iqm": iqm, "mean": mean}


def _strata(strata: Strata) -> list[np.ndarray]:
    out = [np.asarray(s, dtype=float) for s in strata]
    if not out or any(s.size == 0 for s in out):
        raise ValueError("every stratum needs at least one run")
    return out


def stratified_resample(strata: Strata, reps: int, rng: np.random.Generator) -> np.ndarray:
    """(reps, total runs): each row draws every stratum's runs with replacement
    from that stratum alone."""
    parts = [s[rng.integers(0, s.size, size=(reps, s.size))] for s in _strata(strata)]
    return np.concatenate(parts, axis=1)


def bootstrap_ci(
    strata: Strata,
    statistic: Callable = iqm,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile stratified bootstrap interval of `statistic` (a function of a
    sample along its last axis) over the union of the strata."""
    rng = np.random.default_rng(seed)
    values = statistic(stratified_resample(strata, reps, rng), axis=-1)
    alpha = 1.0 - confidence
    lo, hi = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def _poi(xs: list[np.ndarray], ys: list[np.ndarray]) -> float:
    per = []
    for x, y in zip(xs, ys):
        gt = (x[:, None] > y[None, :]).mean()
        eq = (x[:, None] == y[None, :]).mean()
        per.append(gt + 0.5 * eq)
    return float(np.mean(per))


def probability_of_improvement(x: Strata, y: Strata) -> float:
    """P(X > Y): a run of X beats a run of Y of the same stratum (ties 1/2),
    averaged over the strata (x[k] and y[k] are stratum k's runs)."""
    xs, ys = _strata(x), _strata(y)
    if len(xs) != len(ys):
        raise ValueError("x and y need the same strata")
    return _poi(xs, ys)


def probability_of_improvement_ci(
    x: Strata, y: Strata, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of P(X > Y), X and Y resampled within each stratum."""
    xs, ys = _strata(x), _strata(y)
    rng = np.random.default_rng(seed)
    values = np.empty(reps)
    for r in range(reps):
        values[r] = _poi(
            [s[rng.integers(0, s.size, s.size)] for s in xs],
            [s[rng.integers(0, s.size, s.size)] for s in ys],
        )
    alpha = 1.0 - confidence
    lo, hi = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def summarize(
    strata: Strata, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, object]:
    """n, median, IQM and mean of the union of the strata, each with its
    stratified bootstrap interval."""
    data = _strata(strata)
    union = np.concatenate(data)
    out: dict[str, object] = {"n": int(union.size)}
    for name, fn in ESTIMATORS.items():
        out[name] = float(fn(union))
        out[f"{name}_ci"] = list(
            bootstrap_ci(data, fn, reps=reps, confidence=confidence, seed=seed)
        )
    return out


def mean_band(
    curves: np.ndarray, *, reps: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs (rows) at every point (columns) and its bootstrap interval
    (runs resampled with replacement, the same draw at every point). NaN (a run
    with no value yet at a point) is left out of that point's mean."""
    c = np.asarray(curves, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c.shape[0], size=(reps, c.shape[0]))
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point no resampled run reached
        means = np.nanmean(c[idx], axis=1)  # (reps, points)
        lo, hi = np.nanpercentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
        return np.nanmean(c, axis=0), lo, hi
