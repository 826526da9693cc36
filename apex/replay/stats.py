"""A Reverb server's table stats, read without changing what the learner sees.

`table_stats` turns Reverb's server_info of a live server into one plain dict
per table (sizes, counters, the rate limiter's state): neither the rate limiter
nor any item's times-sampled count moves; as fresh as the call. The
coordinator (`stats_from_server_info`), the hang doctor (`format_stats`) and
the tools (tools.status, tools.replay) read replay through it; the item-level
views of a checkpoint are the tools' own (tools.replay_inspect).

Example:
    >>> stats = table_stats(reverb.Client("localhost:1234"))
    >>> print(format_stats(stats))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the type only: this module runs in processes without TensorFlow
    import reverb


def table_stats(client: reverb.Client, timeout: int | None = 10) -> list[dict[str, Any]]:
    """One dict per table: size, capacity, counts, replay ratio, rate-limiter state, signature."""
    return stats_from_server_info(client.server_info(timeout=timeout))


def table_dict(
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
    """One table's stats dict (the keys `table_stats` gives) from its numbers."""
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
            table_dict(
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
