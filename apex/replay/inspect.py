"""Looking inside replay without changing it.

`table_stats` reads Reverb's server_info (no sampling, so neither the rate
limiter nor any item's times-sampled count moves) and derives what a user asks
when a program stalls: can the actors insert, can the learner sample, and the
replay ratio actually achieved.

Example:
    >>> stats = table_stats(reverb.Client("localhost:1234"))
    >>> print(format_stats(stats))
"""

from __future__ import annotations

from typing import Any

import reverb


def table_stats(client: reverb.Client, timeout: int | None = 10) -> list[dict[str, Any]]:
    """One dict per table: size, capacity, counts, replay ratio, rate-limiter state, signature."""
    out = []
    for name, info in sorted(client.server_info(timeout=timeout).items()):
        rl = info.rate_limiter_info
        inserts = int(rl.insert_stats.completed)
        samples = int(rl.sample_stats.completed)
        spi = float(rl.samples_per_insert)
        size = int(info.current_size)
        # Reverb's RateLimiter: inserts are free until min_size_to_sample items
        # exist; then an insert needs (inserts + 1) * spi - samples <= max_diff
        # and a sample needs size >= min_size and inserts * spi - (samples + 1) >= min_diff.
        diff = inserts * spi - samples
        can_insert = size + 1 <= rl.min_size_to_sample or diff + spi <= rl.max_diff
        can_sample = size >= rl.min_size_to_sample and diff - 1 >= rl.min_diff
        out.append(
            {
                "table": name,
                "size": size,
                "capacity": int(info.max_size),
                "inserts": inserts,
                "samples": samples,
                "deletes": inserts - size if inserts >= size else None,
                "unique_samples": int(info.num_unique_samples),
                "samples_per_insert": samples / inserts if inserts else 0.0,
                "rate_limiter": {
                    "samples_per_insert": spi,
                    "min_size_to_sample": int(rl.min_size_to_sample),
                    "min_diff": float(rl.min_diff),
                    "max_diff": float(rl.max_diff),
                    "diff": diff,
                    "can_insert": bool(can_insert),
                    "can_sample": bool(can_sample),
                },
                "signature": None if info.signature is None else repr(info.signature),
            }
        )
    return out


def format_stats(stats: list[dict[str, Any]]) -> str:
    """The stats as a few lines of text per table."""
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
        if t["signature"]:
            lines.append(f"  signature: {t['signature']}")
    return "\n".join(lines)
