"""The experiment report's estimators (tools/experiment_stats.py): IQM, the
stratified bootstrap interval and the probability of improvement, against
hand computations and an analytic interval."""

import math

import numpy as np
import pytest

from tools.experiment_stats import (
    bootstrap_ci,
    iqm,
    mean,
    mean_band,
    median,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_resample,
    summarize,
)


def test_iqm_is_the_mean_of_the_middle_half_as_a_hand_computation():
    # 8 runs: int(0.25 * 8) = 2 cut from each end of the sorted sample.
    x = [100.0, 1.0, 7.0, 3.0, 5.0, -50.0, 4.0, 6.0]
    assert iqm(x) == pytest.approx((3.0 + 4.0 + 5.0 + 6.0) / 4)
    # 5 runs: int(1.25) = 1 cut from each end (scipy.stats.trim_mean(x, 0.25)).
    assert iqm([10.0, 0.0, 2.0, 4.0, 3.0]) == pytest.approx((2.0 + 3.0 + 4.0) / 3)
    # 3 runs: int(0.75) = 0 cut: the mean.
    assert iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)
    # Along an axis, row by row.
    rows = np.array([[1.0, 2.0, 3.0, 100.0], [4.0, 0.0, 8.0, 6.0]])
    assert iqm(rows, axis=-1) == pytest.approx([2.5, 5.0])


def test_iqm_refuses_an_empty_sample():
    with pytest.raises(ValueError):
        iqm([])


def test_bootstrap_interval_of_a_normal_mean_matches_the_analytic_one():
    """For the mean of n normal draws the 95% interval is mean +- 1.96 s / sqrt(n);
    the percentile bootstrap's (plug-in s, n - 1 -> n) agrees within 8% of its
    half-width."""
    rng = np.random.default_rng(1)
    x = rng.normal(10.0, 3.0, size=400)
    lo, hi = bootstrap_ci([x], mean, reps=4000, seed=2)
    half = 1.959964 * x.std(ddof=0) / math.sqrt(x.size)
    assert lo == pytest.approx(x.mean() - half, abs=0.08 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.08 * half)


def test_stratified_resampling_draws_each_strata_from_itself():
    """Every resample keeps each stratum's size and draws only that stratum's runs."""
    a, b = [1.0, 2.0, 3.0], [100.0, 200.0]
    draws = stratified_resample([a, b], reps=500, rng=np.random.default_rng(0))
    assert draws.shape == (500, 5)
    assert set(np.unique(draws[:, :3])) <= set(a)
    assert set(np.unique(draws[:, 3:])) <= set(b)
    # So the mean can never fall where a plain (unstratified) bootstrap puts it
    # when it draws, e.g., 5 runs of b.
    lo, hi = bootstrap_ci([a, b], mean, reps=2000)
    assert (3 * 1.0 + 2 * 100.0) / 5 <= lo <= hi <= (3 * 3.0 + 2 * 200.0) / 5


def test_a_constant_sample_has_a_point_interval():
    assert bootstrap_ci([[5.0, 5.0, 5.0]], iqm, reps=200) == (5.0, 5.0)


def test_probability_of_improvement_counts_pairs_and_ties_by_hand():
    # x beats y in 5 of 9 pairs, ties in 2 (counted 1/2): (5 + 1) / 9.
    x, y = [1.0, 3.0, 5.0], [0.0, 3.0, 5.0]
    # pairs (x > y): 1>0, 3>0, 5>0, 5>3 = 4; ties: 3=3, 5=5 = 2; -> (4 + 1) / 9
    assert probability_of_improvement([x], [y]) == pytest.approx(5 / 9)
    assert probability_of_improvement([y], [x]) == pytest.approx(4 / 9)
    # Over strata: the average of each stratum's.
    assert probability_of_improvement([[2.0], [0.0]], [[1.0], [1.0]]) == pytest.approx(0.5)


def test_probability_of_improvement_interval_brackets_it_and_is_a_point_when_separated():
    x, y = [10.0, 11.0, 12.0], [1.0, 2.0, 3.0]
    assert probability_of_improvement_ci([x], [y], reps=300) == (1.0, 1.0)
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 20), rng.normal(0.0, 1.0, 20)
    p = probability_of_improvement([a], [b])
    lo, hi = probability_of_improvement_ci([a], [b], reps=500)
    assert 0.0 <= lo < p < hi <= 1.0


def test_summarize_gives_every_estimator_with_its_interval():
    s = summarize([[1.0, 2.0, 3.0, 4.0]], reps=300)
    assert s["n"] == 4
    assert s["median"] == median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert s["iqm"] == pytest.approx(2.5) and s["mean"] == pytest.approx(2.5)
    for key in ("median_ci", "iqm_ci", "mean_ci"):
        lo, hi = s[key]
        assert 1.0 <= lo <= 2.5 <= hi <= 4.0


def test_mean_band_skips_runs_without_a_value_yet():
    curves = np.array([[np.nan, 2.0, 4.0], [1.0, 4.0, 4.0]])
    m, lo, hi = mean_band(curves, reps=200)
    assert m == pytest.approx([1.0, 3.0, 4.0])
    assert lo[2] == hi[2] == 4.0
    assert lo[1] <= 3.0 <= hi[1]
