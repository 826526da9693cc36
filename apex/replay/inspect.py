"""Looking inside replay without changing what the learner sees.

Two sources, never sampling:
* `table_stats`: Reverb's server_info of a live server (sizes, counters, the
  rate limiter's state): neither the rate limiter nor any item's times-sampled
  count moves; as fresh as the call.
* Item-level views (`item_table`, `priority_summary`, `breakdown`,
  `select_items`) read a Reverb checkpoint with apex.replay.checkpoint_reader:
  an existing checkpoint directory offline, or for a live server one it writes
  at the moment of the call (`snapshot`; the table is locked while it is
  written, nothing is sampled).

Example:
    >>> stats = table_stats(reverb.Client("localhost:1234"))
    >>> print(format_stats(stats))
    >>> path = snapshot(reverb.Client("localhost:1234"))
    >>> print(format_priorities(priority_summary(item_table(path, "transitions"))))
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import reverb


def table_stats(client: reverb.Client, timeout: int | None = 10) -> list[dict[str, Any]]:
    """One dict per table: size, capacity, counts, replay ratio, rate-limiter state, signature."""
    return stats_from_server_info(client.server_info(timeout=timeout))


def _table_dict(
    name: str,
    size: int,
    capacity: int,
    inserts: int,
    samples: int,
    deletes: int | None,
    unique_samples: int,
    spi: float,
    min_size: int,
    min_diff: float,
    max_diff: float,
    signature: Any,
) -> dict[str, Any]:
    # Reverb's RateLimiter: inserts are free until min_size_to_sample items
    # exist; then an insert needs (inserts + 1) * spi - samples <= max_diff
    # and a sample needs size >= min_size and inserts * spi - (samples + 1) >= min_diff.
    diff = inserts * spi - samples
    return {
        "table": name,
        "size": size,
        "capacity": capacity,
        "inserts": inserts,
        "samples": samples,
        "deletes": deletes,
        "unique_samples": unique_samples,
        "samples_per_insert": samples / inserts if inserts else 0.0,
        "rate_limiter": {
            "samples_per_insert": spi,
            "min_size_to_sample": min_size,
            "min_diff": min_diff,
            "max_diff": max_diff,
            "diff": diff,
            "can_insert": bool(size + 1 <= min_size or diff + spi <= max_diff),
            "can_sample": bool(size >= min_size and diff - 1 >= min_diff),
        },
        "signature": None if signature is None else repr(signature),
    }


def stats_from_server_info(server_info: dict[str, Any]) -> list[dict[str, Any]]:
    """table_stats from an already fetched `client.server_info()`."""
    out = []
    for name, info in sorted(server_info.items()):
        rl = info.rate_limiter_info
        inserts = int(rl.insert_stats.completed)
        size = int(info.current_size)
        out.append(
            _table_dict(
                name,
                size,
                int(info.max_size),
                inserts,
                int(rl.sample_stats.completed),
                inserts - size if inserts >= size else None,
                int(info.num_unique_samples),
                float(rl.samples_per_insert),
                int(rl.min_size_to_sample),
                float(rl.min_diff),
                float(rl.max_diff),
                info.signature,
            )
        )
    return out


def format_stats(stats: list[dict[str, Any]], signature: bool = True) -> str:
    """The stats as a few lines of text per table (the signature's only if `signature`)."""
    lines = []
    for t in stats:
        rl = t["rate_limiter"]
        lines.append(
            f"table {t['table']}: {t['size']:,}/{t['capacity']:,} items | inserts {t['inserts']:,} | "
            f"samples {t['samples']:,} | samples/insert {t['samples_per_insert']:.2f} "
            f"(target {rl['samples_per_insert']:g}) | unique sampled {t['unique_samples']:,}"
        )
        lines.append(
            f"  rate limiter: can_insert={rl['can_insert']} can_sample={rl['can_sample']} "
            f"diff={rl['diff']:,.0f} in [{rl['min_diff']:,.0f}, {rl['max_diff']:,.0f}] "
            f"min_size_to_sample={rl['min_size_to_sample']:,}"
        )
        if signature and t["signature"]:
            lines.append(f"  signature: {t['signature']}")
    return "\n".join(lines)


# ------------------------------------------------------------------ snapshots
#
# Reverb cannot list items, and sampling moves times_sampled and the rate
# limiter. So item-level views read a checkpoint: of a live server, one it
# writes at the moment of the call (`snapshot`: no sampling, no counter moves;
# the table is locked while the checkpoint is written), or an existing
# checkpoint directory offline. apex.replay.checkpoint_reader parses it.


def snapshot(client: reverb.Client) -> str:
    """Asks a live server to write a checkpoint now; returns its directory.

    Note: Reverb's checkpointer keeps only the newest checkpoint in its root.
    """
    return client.checkpoint()


def resolve_checkpoint(path: str) -> str:
    """A complete checkpoint directory: `path` itself, or the newest one under a checkpointer root."""
    from apex.replay import checkpoint_reader as cr

    if not os.path.isdir(path):
        raise cr.CheckpointNotFoundError(f"{path!r} is not a directory")
    if os.path.isfile(os.path.join(path, cr.DONE_FILE)):
        return path
    if os.path.isfile(os.path.join(path, cr.TABLES_FILE)):
        raise cr.IncompleteCheckpointError(
            f"{path!r} has no {cr.DONE_FILE} marker: a half-written checkpoint is never read"
        )
    latest = cr.latest_checkpoint(path)
    if latest is None:
        raise cr.CheckpointNotFoundError(f"no complete Reverb checkpoint in {path!r}")
    return latest


def checkpoint_time(path: str) -> float:
    """When the checkpoint was completed (its DONE marker's mtime, unix s)."""
    from apex.replay.checkpoint_reader import DONE_FILE

    return os.path.getmtime(os.path.join(path, DONE_FILE))


def checkpoint_stats(path: str) -> list[dict[str, Any]]:
    """table_stats of a checkpoint directory (same keys)."""
    from apex.replay.checkpoint_reader import read_tables

    out = []
    for name, t in sorted(read_tables(path).items()):
        rl = t.rate_limiter
        table = _table_dict(
            name,
            t.num_items,
            t.max_size,
            rl.inserts,
            rl.samples,
            rl.deletes,
            t.num_unique_samples,
            rl.samples_per_insert,
            rl.min_size_to_sample,
            rl.min_diff,
            rl.max_diff,
            t.signature,
        )
        out.append({**table, "sampler": t.sampler, "remover": t.remover})
    return out


PROVENANCE = ("actor", "slot", "epsilon", "version", "insert_time")


def item_table(path: str, table: str, provenance: bool = True) -> dict[str, np.ndarray]:
    """Columns of every item of `table` in a checkpoint: key, priority,
    times_sampled, inserted_at, age_seconds (at the checkpoint), and with
    `provenance` the items' actor, slot, epsilon, version and insert_time."""
    from apex.replay.checkpoint_reader import iter_items
    from apex.replay.tables import unpack_item

    cols: dict[str, list] = {k: [] for k in ("key", "priority", "times_sampled", "inserted_at")}
    prov: dict[str, list] = {k: [] for k in PROVENANCE}
    for item in iter_items(path, table, decode=provenance):
        cols["key"].append(item.key)
        cols["priority"].append(item.priority)
        cols["times_sampled"].append(item.times_sampled)
        cols["inserted_at"].append(item.inserted_at)
        if provenance and isinstance(item.data, dict):
            data = unpack_item(item.data)
            for k in PROVENANCE:
                if k in data:
                    prov[k].append(data[k].item())
    out = {
        "key": np.asarray(cols["key"], np.uint64),
        "priority": np.asarray(cols["priority"], np.float64),
        "times_sampled": np.asarray(cols["times_sampled"], np.int64),
        "inserted_at": np.asarray(cols["inserted_at"], np.float64),
    }
    out["age_seconds"] = checkpoint_time(path) - out["inserted_at"]
    for k, v in prov.items():
        if len(v) == len(out["key"]) and v:
            out[k] = np.asarray(v)
    return out


def priority_summary(cols: dict[str, np.ndarray], k: int = 10, bins: int = 20) -> dict[str, Any]:
    """Histogram (log-spaced bins when priorities span > 10x) and the top/bottom k items."""
    p = cols["priority"]
    if len(p) == 0:
        return {"count": 0, "histogram": {"edges": [], "counts": []}, "top": [], "bottom": []}
    lo, hi = float(p.min()), float(p.max())
    if lo > 0 and hi / lo > 10:
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
    counts, edges = np.histogram(p, edges)
    order = np.argsort(p, kind="stable")

    def rows(idx: np.ndarray) -> list[dict[str, Any]]:
        return [
            {
                "key": int(cols["key"][i]),
                "priority": float(p[i]),
                "times_sampled": int(cols["times_sampled"][i]),
                "age_seconds": float(cols["age_seconds"][i]),
            }
            for i in idx
        ]

    return {
        "count": int(len(p)),
        "sum": float(p.sum()),
        "mean": float(p.mean()),
        "min": lo,
        "max": hi,
        "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
        "top": rows(order[::-1][:k]),
        "bottom": rows(order[:k]),
    }


def format_priorities(s: dict[str, Any], width: int = 40) -> str:
    """The histogram as text bars, then the top and bottom items."""
    if not s["count"]:
        return "no items"
    lines = [
        f"{s['count']:,} items; priority min {s['min']:.4g}, mean {s['mean']:.4g}, "
        f"max {s['max']:.4g}, sum {s['sum']:.4g}"
    ]
    edges, counts = s["histogram"]["edges"], s["histogram"]["counts"]
    top = max(counts) or 1
    for a, b, c in zip(edges[:-1], edges[1:], counts):
        lines.append(f"  [{a:10.4g}, {b:10.4g}) {c:>9,} {'#' * round(width * c / top)}")
    for name in ("top", "bottom"):
        lines.append(f"{name} {len(s[name])}:  key  priority  times_sampled  age_s")
        lines += [
            f"  {r['key']:>20}  {r['priority']:.4g}  {r['times_sampled']}  {r['age_seconds']:.1f}"
            for r in s[name]
        ]
    return "\n".join(lines)


def save_histogram_png(s: dict[str, Any], path: str, title: str = "priorities") -> str:
    """Writes the priority histogram as a PNG; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = np.asarray(s["histogram"]["edges"])
    counts = np.asarray(s["histogram"]["counts"])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", edgecolor="black")
    if len(edges) > 1 and edges[0] > 0 and edges[-1] / edges[0] > 10:
        ax.set_xscale("log")
    ax.set_xlabel("priority")
    ax.set_ylabel("items")
    ax.set_title(f"{title}: {s['count']:,} items")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def breakdown(
    cols: dict[str, np.ndarray], band_edges: tuple[float, ...] = (0.01, 0.1), version_bins: int = 5
) -> dict[str, list[dict[str, Any]]]:
    """Count, share, mean priority, priority share, mean age and mean times sampled of
    the items grouped by actor, by epsilon band and by parameter version (in
    `version_bins` equal ranges)."""
    from apex.exploration import band_labels, epsilon_bands

    out: dict[str, list[dict[str, Any]]] = {}
    n = len(cols["priority"])
    if n == 0:
        return out
    total_p = float(cols["priority"].sum()) or 1.0

    def group(labels: np.ndarray, names: dict[Any, str]) -> list[dict[str, Any]]:
        rows = []
        for value in np.unique(labels):
            m = labels == value
            rows.append(
                {
                    "group": names.get(value, str(value)),
                    "count": int(m.sum()),
                    "share": float(m.sum() / n),
                    "mean_priority": float(cols["priority"][m].mean()),
                    "priority_share": float(cols["priority"][m].sum() / total_p),
                    "mean_age_seconds": float(cols["age_seconds"][m].mean()),
                    "mean_times_sampled": float(cols["times_sampled"][m].mean()),
                }
            )
        return rows

    if "actor" in cols:
        out["actor"] = group(cols["actor"], {a: f"actor {a}" for a in np.unique(cols["actor"])})
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
    return out


def format_breakdown(b: dict[str, list[dict[str, Any]]]) -> str:
    lines = []
    for by, rows in b.items():
        lines.append(f"by {by}:")
        lines.append(
            f"  {'group':<22} {'items':>9} {'share':>6} {'mean prio':>10} {'prio share':>10} "
            f"{'mean age s':>10} {'sampled':>8}"
        )
        for r in rows:
            lines.append(
                f"  {r['group']:<22} {r['count']:>9,} {r['share']:>6.1%} {r['mean_priority']:>10.4g} "
                f"{r['priority_share']:>10.1%} {r['mean_age_seconds']:>10.1f} "
                f"{r['mean_times_sampled']:>8.2f}"
            )
    return "\n".join(lines) if lines else "no items"


def select_items(path: str, table: str, n: int, order: str = "newest") -> list[dict[str, Any]]:
    """N decoded items with their keys, priorities, times sampled and payload.

    order: newest, oldest, top (highest priority), bottom, or random (seeded).
    """
    from apex.replay.checkpoint_reader import iter_items
    from apex.replay.tables import unpack_item

    valid = ("newest", "oldest", "top", "bottom", "random")
    if order not in valid:
        raise ValueError(f"order={order!r} is invalid: expected one of {list(valid)}")
    when = checkpoint_time(path)
    if order == "oldest":
        chosen = None
    else:
        cols = item_table(path, table, provenance=False)
        p = cols["priority"]
        if order == "newest":
            idx = np.arange(len(p))[-n:][::-1]
        elif order == "top":
            idx = np.argsort(-p, kind="stable")[:n]
        elif order == "bottom":
            idx = np.argsort(p, kind="stable")[:n]
        else:
            idx = np.random.default_rng(0).choice(len(p), size=min(n, len(p)), replace=False)
        chosen = {int(cols["key"][i]): rank for rank, i in enumerate(idx)}
    out: list[tuple[int, dict[str, Any]]] = []
    for item in iter_items(path, table, decode=True, only_keys=chosen):
        if chosen is None:
            if len(out) >= n:
                break
            rank = len(out)
        else:
            rank = chosen[item.key]
        data = (
            {k: np.array(v) for k, v in unpack_item(item.data).items()}
            if isinstance(item.data, dict)
            else item.data
        )
        out.append(
            (
                rank,
                {
                    "key": item.key,
                    "priority": item.priority,
                    "times_sampled": item.times_sampled,
                    "inserted_at": item.inserted_at,
                    "age_seconds": when - item.inserted_at,
                    "data": data,
                },
            )
        )
        if chosen is not None and len(out) == len(chosen):
            break
    return [row for _, row in sorted(out, key=lambda x: x[0])]


def items_to_json(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON-able copies: arrays become (nested) lists."""

    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return [plain(it) for it in items]


def save_items_npz(items: list[dict[str, Any]], path: str) -> str:
    """One npz: `key` (uint64, exact), `priority`, `times_sampled`, `inserted_at`,
    `age_seconds`, and `data/<field>` stacked over the items."""
    arrays: dict[str, np.ndarray] = {}
    # Reverb's keys are uint64: left to np.asarray, a list of them becomes float64
    # (or object) and most keys are no longer exact.
    dtypes = {
        "key": np.uint64,
        "priority": np.float64,
        "times_sampled": np.int64,
        "inserted_at": np.float64,
        "age_seconds": np.float64,
    }
    for k, dtype in dtypes.items():
        arrays[k] = np.asarray([it[k] for it in items], dtype=dtype)
    if items and isinstance(items[0]["data"], dict):
        for field in items[0]["data"]:
            arrays[f"data/{field}"] = np.stack([it["data"][field] for it in items])
    np.savez(path, **arrays)
    return path
