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

Sharded replay (`replay.num_shards` = S > 1, apex.replay.shards): every view
also exists over several shards, per shard and in total: `total_stats` /
`format_shard_stats` for the stats, and `pooled_item_table` (every shard's
items with a `shard` column) for `priority_summary` and `breakdown`, which then
add per-shard figures; `select_shard_items` picks items over all shards.
`read_shard_addresses` reads RUN_DIR/replay_addresses, `resolve_shards` a
checkpoint directory's shard directories (`replay_0/`, `replay_1/`, ...).

Example:
    >>> stats = table_stats(reverb.Client("localhost:1234"))
    >>> print(format_stats(stats))
    >>> path = snapshot(reverb.Client("localhost:1234"))
    >>> print(format_priorities(priority_summary(item_table(path, "transitions"))))
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np
import reverb

from apex.replay.shards import ADDRESSES_FILE, shard_rule


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


# ---------------------------------------------------------------------- shards
#
# A sharded replay (apex.replay.shards) is S Reverb servers: actor i writes to
# shard i % S, each shard has its own table (capacity / S) and rate limiter.
# The views below show each shard and the sum over them.

_SHARD_DIR = re.compile(r"^replay_(\d+)$")


def read_shard_addresses(run_dir: str) -> list[tuple[str, str]] | None:
    """The shards of a live run: [(shard name, HOST:PORT)] in shard order from
    RUN_DIR/replay_addresses (one `<shard_name> <HOST:PORT>` per line), or None
    when the run has no such file (one shard: RUN_DIR/replay_address).

    Raises:
        ValueError: a line is not `<shard_name> <HOST:PORT>`.
    """
    path = os.path.join(run_dir, ADDRESSES_FILE)
    if not os.path.exists(path):
        return None
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(
                    f"{path} line {n}: expected '<shard_name> <HOST:PORT>', got {line.strip()!r}"
                )
            out.append((parts[0], parts[1]))
    return out


def manifest_num_shards(path: str) -> int | None:
    """replay.num_shards of the run checkpoint at `path` (its manifest.json's
    config; 1 when the config predates shards), or None without a readable manifest."""
    from apex.checkpointing import MANIFEST_FILE, checkpoint_num_shards

    try:
        with open(os.path.join(path, MANIFEST_FILE)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return checkpoint_num_shards(manifest) if isinstance(manifest, dict) else None


def shard_dirs(path: str) -> list[str]:
    """The shard directories (`replay_0`, `replay_1`, ...) in `path`, in shard order."""
    if not os.path.isdir(path):
        return []
    found = []
    for name in os.listdir(path):
        m = _SHARD_DIR.match(name)
        if m and os.path.isdir(os.path.join(path, name)):
            found.append((int(m.group(1)), name))
    return [name for _, name in sorted(found)]


def resolve_shards(path: str) -> list[tuple[str, str]]:
    """[(shard name, complete Reverb checkpoint directory)] of `path`: the shard
    directories `replay_0/`, `replay_1/`, ... it holds (a run checkpoint of a
    sharded replay, or the run's replay_checkpoints/ root; each a checkpoint or
    a checkpointer root: its newest complete checkpoint), in shard order; else
    [("replay", resolve_checkpoint(path))], one shard, exactly as before."""
    names = shard_dirs(path)
    if not names:
        return [("replay", resolve_checkpoint(path))]
    return [(name, resolve_checkpoint(os.path.join(path, name))) for name in names]


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


def format_total(t: dict[str, Any], num_shards: int | None = None) -> str:
    """One line: a table's totals over the shards (`total_stats`); `num_shards`:
    how many shards the replay has, when more than were read."""
    of = t["shards"] if num_shards is None else num_shards
    return (
        f"total over {t['shards']}/{of} shards: table {t['table']}: {t['size']:,}/{t['capacity']:,} "
        f"items | inserts {t['inserts']:,} | samples {t['samples']:,} | samples/insert "
        f"{t['samples_per_insert']:.2f} (target {t['target_samples_per_insert']:g}) | unique "
        f"sampled {t['unique_samples']:,} | can_insert on {t['can_insert_shards']}/{t['shards']} "
        f"shards | can_sample on {t['can_sample_shards']}/{t['shards']} shards"
    )


def format_shard_stats(
    shards: list[dict[str, Any]], signature: bool = True, num_shards: int | None = None
) -> str:
    """Each shard's stats, then the totals. `shards`: dicts with `shard` (name),
    `tables` (table_stats, or None: not reachable), and optionally `address` or
    `checkpoint` (where it was read) and `note` (added to its header)."""
    lines = []
    for sh in shards:
        head = f"shard {sh['shard']}"
        if sh.get("address"):
            head += f" at {sh['address']}"
        elif sh.get("checkpoint"):
            head += f" from {sh['checkpoint']}"
        if sh.get("note"):
            head += f" ({sh['note']})"
        if sh.get("tables") is None:
            lines.append(f"{head}: not reachable")
            continue
        lines.append(head)
        lines += ["  " + line for line in format_stats(sh["tables"], signature=False).splitlines()]
    totals = total_stats([sh.get("tables") for sh in shards])
    lines += [format_total(t, num_shards) for t in totals]
    if signature:
        sigs = {t["table"]: t["signature"] for sh in shards for t in sh.get("tables") or []}
        lines += [f"signature of {name}: {sig}" for name, sig in sigs.items() if sig]
    return "\n".join(lines)


def format_shard_sizes(shards: list[dict[str, Any]], num_shards: int | None = None) -> str:
    """One line per table: the totals and every shard's size (tools.replay watch)."""
    lines = []
    for t in total_stats([sh.get("tables") for sh in shards]):
        sizes = []
        for sh in shards:
            mine = [x for x in sh.get("tables") or [] if x["table"] == t["table"]]
            sizes.append(
                f"{sh['shard']} {mine[0]['size']:,}/{mine[0]['capacity']:,}"
                if mine
                else f"{sh['shard']} unreachable"
            )
        lines.append(f"{format_total(t, num_shards)} | sizes: {', '.join(sizes)}")
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


def pooled_item_table(
    shards: list[tuple[str, str]], table: str, provenance: bool = True
) -> dict[str, np.ndarray]:
    """`item_table` of every shard ([(shard name, checkpoint dir)]) concatenated
    in shard order, with a `shard` column (the shard's name). Ages are each
    shard's own (at its checkpoint); columns are those every non-empty shard has."""
    parts = [(name, item_table(path, table, provenance)) for name, path in shards]
    filled = [cols for _, cols in parts if len(cols["key"])]
    if not filled:
        out = dict(parts[0][1])
    else:
        keys = [k for k in filled[0] if all(k in cols for cols in filled)]
        out = {k: np.concatenate([cols[k] for cols in filled]) for k in keys}
    out["shard"] = np.asarray(
        [name for name, cols in parts for _ in range(len(cols["key"]))], dtype=str
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


def format_priorities(s: dict[str, Any], width: int = 40) -> str:
    """The histogram as text bars, then the top and bottom items (with shards:
    each shard's figures and bin counts too, and each item's shard)."""
    shards = s.get("shards")
    if not s["count"]:
        if shards:
            return "no items (" + ", ".join(f"{r['shard']}: 0" for r in shards) + ")"
        return "no items"
    lines = [
        f"{s['count']:,} items; priority min {s['min']:.4g}, mean {s['mean']:.4g}, "
        f"max {s['max']:.4g}, sum {s['sum']:.4g}"
    ]
    for r in shards or []:
        lines.append(
            f"  {r['shard']}: {r['count']:,} items; priority min {r['min']:.4g}, mean "
            f"{r['mean']:.4g}, max {r['max']:.4g}, sum {r['sum']:.4g}"
            if r["count"]
            else f"  {r['shard']}: no items"
        )
    edges, counts = s["histogram"]["edges"], s["histogram"]["counts"]
    top = max(counts) or 1
    if shards:
        lines.append(f"  {'bin':<24} {'all':>9}" + "".join(f" {r['shard']:>10}" for r in shards))
    for j, (a, b, c) in enumerate(zip(edges[:-1], edges[1:], counts)):
        per = "".join(f" {r['counts'][j]:>10,}" for r in shards or [])
        lines.append(f"  [{a:10.4g}, {b:10.4g}) {c:>9,}{per} {'#' * round(width * c / top)}")
    for name in ("top", "bottom"):
        lines.append(
            f"{name} {len(s[name])}:  key  priority  times_sampled  age_s"
            + ("  shard" if shards is not None else "")
        )
        lines += [
            f"  {r['key']:>20}  {r['priority']:.4g}  {r['times_sampled']}  {r['age_seconds']:.1f}"
            + (f"  {r['shard']}" if "shard" in r else "")
            for r in s[name]
        ]
    return "\n".join(lines)


def save_histogram_png(s: dict[str, Any], path: str, title: str = "priorities") -> str:
    """Writes the priority histogram as a PNG; returns the path. With shards the
    bars are stacked by shard (their total is the pooled histogram)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = np.asarray(s["histogram"]["edges"])
    counts = np.asarray(s["histogram"]["counts"])
    fig, ax = plt.subplots(figsize=(7, 4))
    shards = [r for r in s.get("shards") or [] if r["count"]]
    if shards and len(edges) > 1:
        bottom = np.zeros(len(counts))
        for r in shards:
            c = np.asarray(r["counts"])
            ax.bar(
                edges[:-1],
                c,
                width=np.diff(edges),
                bottom=bottom,
                align="edge",
                edgecolor="black",
                label=f"{r['shard']} ({r['count']:,})",
            )
            bottom += c
        ax.legend()
    else:
        ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", edgecolor="black")
    if len(edges) > 1 and edges[0] > 0 and edges[-1] / edges[0] > 10:
        ax.set_xscale("log")
    ax.set_xlabel("priority")
    ax.set_ylabel("items")
    suffix = f" in {len(s['shards'])} shards" if s.get("shards") else ""
    ax.set_title(f"{title}: {s['count']:,} items{suffix}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


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
    from apex.exploration import band_labels, epsilon_bands

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
            from apex.replay.shards import shard_name, shard_of_actor

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


def format_breakdown(b: dict[str, list[dict[str, Any]]], num_shards: int | None = None) -> str:
    """The breakdown as text tables; with shards (`num_shards` > 1) it first
    states the actor -> shard rule, and the actor rows name their shard (`!`:
    not the one the rule gives)."""
    lines = []
    if num_shards and num_shards > 1:
        lines.append(f"{num_shards} shards: {shard_rule(num_shards)}")
    header = (
        f"  {'group':<22} {'items':>9} {'share':>6} {'mean prio':>10} {'prio share':>10} "
        f"{'mean age s':>10} {'sampled':>8}"
    )

    def row(r: dict[str, Any]) -> str:
        line = (
            f"  {r['group']:<22} {r['count']:>9,} {r['share']:>6.1%} {r['mean_priority']:>10.4g} "
            f"{r['priority_share']:>10.1%} {r['mean_age_seconds']:>10.1f} "
            f"{r['mean_times_sampled']:>8.2f}"
        )
        if "shards" in r:
            where = ",".join(r["shards"])
            expected = r.get("expected_shard")
            bad = expected is not None and r["shards"] != [expected]
            line += f"  {where}" + (f" (! expected {expected})" if bad else "")
        return line

    for by, rows in b.items():
        if by == "total":
            continue
        lines.append(f"by {by}:")
        sharded = any("shards" in r for r in rows)
        lines.append(header + ("  shard" if sharded else ""))
        lines += [row(r) for r in rows]
        if by == "shard" and "total" in b:
            lines += [row(r) for r in b["total"]]
    if not any(k != "total" for k in b):
        return "\n".join(lines + ["no items"])
    return "\n".join(lines)


def select_items(path: str, table: str, n: int, order: str = "newest") -> list[dict[str, Any]]:
    """N decoded items with their keys, priorities, times sampled and payload.

    order: newest, oldest, top (highest priority), bottom, or random (seeded).
    """
    _check_order(order)
    if order == "oldest":
        chosen = None
    else:
        cols = item_table(path, table, provenance=False)
        idx = _pick(cols, n, order, by_position=True)
        chosen = {int(cols["key"][i]): rank for rank, i in enumerate(idx)}
    return [row for _, row in sorted(_decode_items(path, table, n, chosen), key=lambda x: x[0])]


_ORDERS = ("newest", "oldest", "top", "bottom", "random")


def _check_order(order: str) -> None:
    if order not in _ORDERS:
        raise ValueError(f"order={order!r} is invalid: expected one of {list(_ORDERS)}")


def _pick(cols: dict[str, np.ndarray], n: int, order: str, by_position: bool) -> np.ndarray:
    """Indices of the `n` items `order` picks, in the order they are shown.
    newest: the last ones of one checkpoint (`by_position`, items are stored in
    insertion order), else the latest inserted_at."""
    p = cols["priority"]
    if order == "newest":
        if by_position:
            return np.arange(len(p))[-n:][::-1]
        return np.argsort(cols["inserted_at"], kind="stable")[::-1][:n]
    if order == "top":
        return np.argsort(-p, kind="stable")[:n]
    if order == "bottom":
        return np.argsort(p, kind="stable")[:n]
    return np.random.default_rng(0).choice(len(p), size=min(n, len(p)), replace=False)


def _decode_items(
    path: str, table: str, n: int, chosen: dict[int, int] | None
) -> list[tuple[int, dict[str, Any]]]:
    """(rank, item) of the items `chosen` ({key: rank}) of a checkpoint, or of
    its first `n` items when `chosen` is None."""
    from apex.replay.checkpoint_reader import iter_items
    from apex.replay.tables import unpack_item

    when = checkpoint_time(path)
    out: list[tuple[int, dict[str, Any]]] = []
    if chosen is not None and not chosen:
        return out
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
    return out


def select_shard_items(
    shards: list[tuple[str, str]], table: str, n: int, order: str = "newest"
) -> list[dict[str, Any]]:
    """`select_items` over several shards ([(shard name, checkpoint dir)]): the
    N items `order` picks among all of them (newest/oldest by insertion time;
    random: seeded, uniform over all items), each with `shard` (its shard's name)."""
    _check_order(order)
    if order == "oldest":  # each shard's n oldest hold the n oldest of all
        rows = [
            {**it, "shard": name}
            for name, path in shards
            for it in select_items(path, table, n, "oldest")
        ]
        return sorted(rows, key=lambda r: r["inserted_at"])[:n]
    cols = pooled_item_table(shards, table, provenance=False)
    idx = _pick(cols, n, order, by_position=False)
    out: list[tuple[int, dict[str, Any]]] = []
    for name, path in shards:
        chosen = {
            int(cols["key"][i]): rank for rank, i in enumerate(idx) if cols["shard"][i] == name
        }
        out += [(rank, {**it, "shard": name}) for rank, it in _decode_items(path, table, n, chosen)]
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
    `age_seconds`, `shard` (items of several shards), and `data/<field>`
    stacked over the items."""
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
    if items and "shard" in items[0]:  # items of a sharded replay: each one's shard
        arrays["shard"] = np.asarray([it["shard"] for it in items], dtype=str)
    if items and isinstance(items[0]["data"], dict):
        for field in items[0]["data"]:
            arrays[f"data/{field}"] = np.stack([it["data"][field] for it in items])
    np.savez(path, **arrays)
    return path


def save_items_png(items: list[dict[str, Any]], path: str, max_frames: int = 16) -> str:
    """Writes the image frames of `items` (select_items) as one PNG, one row per
    item: its obs stack's frames then its next_obs stack's (Ape-X transitions,
    whichever layout stored them), or the first `max_frames` frames of an R2D2
    sequence's obs; frames are uint8 [..., H, W] grayscale. Returns the path;
    ValueError if the items hold no image frames."""
    from PIL import Image

    rows = []
    for it in items:
        data = it["data"] if isinstance(it["data"], dict) else {}
        stacks = [np.asarray(data[k]) for k in ("obs", "next_obs") if k in data]
        frames = [f for s in stacks if s.ndim >= 3 for f in s.reshape(-1, *s.shape[-2:])]
        frames = frames[: 2 * max_frames] if "next_obs" in data else frames[:max_frames]
        if frames:
            gap = np.full((frames[0].shape[0], 2), 255, np.uint8)
            rows.append(np.concatenate([x for f in frames for x in (f.astype(np.uint8), gap)], 1))
    if not rows:
        raise ValueError("these items hold no image frames (observations of [..., H, W] uint8)")
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 2), (0, width - r.shape[1])), constant_values=255) for r in rows]
    Image.fromarray(np.concatenate(rows, 0)).save(path)
    return path
