"""Figures over replay: totals over shards, the priority distribution, groups.

`total_stats` sums the shards' table stats; `priority_summary` gives the
priority histogram (log-spaced when priorities span > 10x) and the top/bottom
items; `breakdown` groups the items by actor, epsilon band, parameter version
(and shard). Plain dicts and lists, JSON-able; tools.replay_inspect.text
writes them as text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from apex import band_labels, epsilon_bands
from apex.replay import shard_name, shard_of_actor


def total_stats(per_shard: list[list[dict[str, Any]] | None]) -> list[dict[str, Any]]:
    """Per table, the sums over the shards' table stats (`None`: a shard that
    could not be read, left out): size, capacity, inserts, samples, deletes,
    unique samples, the achieved samples per insert, and on how many shards
    the rate limiter lets an insert / a sample through."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for stats in per_shard:
        for t in stats or []:
            by_table.setdefault(t["table"], []).append(t)
    out = []
    for name, ts in sorted(by_table.items()):
        inserts = sum(t["inserts"] for t in ts)
        samples = sum(t["samples"] for t in ts)
        deletes = [t["deletes"] for t in ts]
        out.append(
            {
                "table": name,
                "shards": len(ts),
                "size": sum(t["size"] for t in ts),
                "capacity": sum(t["capacity"] for t in ts),
                "inserts": inserts,
                "samples": samples,
                "deletes": None if None in deletes else sum(deletes),
                "unique_samples": sum(t["unique_samples"] for t in ts),
                "samples_per_insert": samples / inserts if inserts else 0.0,
                "target_samples_per_insert": ts[0]["rate_limiter"]["samples_per_insert"],
                "min_size_to_sample": sum(t["rate_limiter"]["min_size_to_sample"] for t in ts),
                "can_insert_shards": sum(bool(t["rate_limiter"]["can_insert"]) for t in ts),
                "can_sample_shards": sum(bool(t["rate_limiter"]["can_sample"]) for t in ts),
            }
        )
    return out


def priority_summary(
    cols: dict[str, np.ndarray], k: int = 10, bins: int = 20, shards: list[str] | None = None
) -> dict[str, Any]:
    """Histogram (log-spaced bins when priorities span > 10x) and the top/bottom k items.

    With a `shard` column (`pooled_item_table`) the histogram and the top/bottom
    items are over all shards (each item names its shard), and `shards` holds
    each shard's count, sum, mean, min, max and counts in the same bins
    (`shards`: the names to list, empty ones too; default: those with items).
    """
    p = cols["priority"]
    names = None
    if "shard" in cols:
        names = list(shards) if shards is not None else list(dict.fromkeys(cols["shard"].tolist()))
    if len(p) == 0:
        out: dict[str, Any] = {
            "count": 0,
            "histogram": {"edges": [], "counts": []},
            "top": [],
            "bottom": [],
        }
        if names is not None:
            out["shards"] = [{"shard": name, "count": 0, "counts": []} for name in names]
        return out
    lo, hi = float(p.min()), float(p.max())
    if lo > 0 and hi / lo > 10:
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
    counts, edges = np.histogram(p, edges)
    order = np.argsort(p, kind="stable")

    def rows(idx: np.ndarray) -> list[dict[str, Any]]:
        out = []
        for i in idx:
            row = {
                "key": int(cols["key"][i]),
                "priority": float(p[i]),
                "times_sampled": int(cols["times_sampled"][i]),
                "age_seconds": float(cols["age_seconds"][i]),
            }
            if names is not None:
                row["shard"] = str(cols["shard"][i])
            out.append(row)
        return out

    summary = {
        "count": int(len(p)),
        "sum": float(p.sum()),
        "mean": float(p.mean()),
        "min": lo,
        "max": hi,
        "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
        "top": rows(order[::-1][:k]),
        "bottom": rows(order[:k]),
    }
    if names is not None:
        per = []
        for name in names:
            q = p[cols["shard"] == name]
            row: dict[str, Any] = {"shard": name, "count": int(len(q))}
            if len(q):
                row.update(
                    sum=float(q.sum()), mean=float(q.mean()), min=float(q.min()), max=float(q.max())
                )
            row["counts"] = np.histogram(q, edges)[0].tolist()
            per.append(row)
        summary["shards"] = per
    return summary


def breakdown(
    cols: dict[str, np.ndarray],
    band_edges: tuple[float, ...] = (0.01, 0.1),
    version_bins: int = 5,
    num_shards: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Count, share, mean priority, priority share, mean age and mean times sampled of
    the items grouped by actor, by epsilon band and by parameter version (in
    `version_bins` equal ranges).

    With a `shard` column (`pooled_item_table`) also by shard, the same over
    all items (`total`, one row), and each actor row says which shards its
    items are in (`shards`) and, given `num_shards`, the one it writes to
    (`expected_shard`: apex.replay.shards.shard_of_actor).
    """
    out: dict[str, list[dict[str, Any]]] = {}
    n = len(cols["priority"])
    if n == 0:
        return out
    total_p = float(cols["priority"].sum()) or 1.0
    sharded = "shard" in cols

    def group(labels: np.ndarray, names: dict[Any, str]) -> list[dict[str, Any]]:
        rows = []
        for value in np.unique(labels):
            m = labels == value
            row = {
                "group": names.get(value, str(value)),
                "count": int(m.sum()),
                "share": float(m.sum() / n),
                "mean_priority": float(cols["priority"][m].mean()),
                "priority_share": float(cols["priority"][m].sum() / total_p),
                "mean_age_seconds": float(cols["age_seconds"][m].mean()),
                "mean_times_sampled": float(cols["times_sampled"][m].mean()),
            }
            rows.append(row)
        return rows

    if sharded:
        out["shard"] = group(cols["shard"], {})
    if "actor" in cols:
        out["actor"] = group(cols["actor"], {a: f"actor {a}" for a in np.unique(cols["actor"])})
        if sharded:
            for a, row in zip(np.unique(cols["actor"]), out["actor"]):
                row["shards"] = sorted(set(cols["shard"][cols["actor"] == a].tolist()))
                if num_shards:
                    row["expected_shard"] = shard_name(
                        shard_of_actor(int(a), num_shards), num_shards
                    )
    if "epsilon" in cols:
        labels = band_labels(band_edges)
        bands = epsilon_bands(cols["epsilon"], band_edges)
        out["epsilon_band"] = group(bands, dict(enumerate(labels)))
    if "version" in cols:
        v = cols["version"].astype(np.int64)
        lo, hi = int(v.min()), int(v.max())
        edges = np.unique(np.linspace(lo, hi + 1, version_bins + 1).astype(np.int64))
        idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)
        names = {i: f"versions {edges[i]}-{edges[i + 1] - 1}" for i in range(len(edges) - 1)}
        out["version"] = group(idx, names)
    if sharded:
        out["total"] = group(np.zeros(n, np.int64), {0: "total"})
    return out
