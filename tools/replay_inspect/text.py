"""The inspector's figures as text: stats per shard and in total, the priority
histogram as bars, the breakdown as tables (what tools.replay and tools.status print).

A sharded replay (apex.replay.shards) is S Reverb servers: actor i writes to
shard i % S, each shard has its own table (capacity / S) and rate limiter.
The shard views show each shard and the sum over them.
"""

from __future__ import annotations

from typing import Any

from apex.replay import format_stats, shard_rule
from tools.replay_inspect.summaries import total_stats


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
