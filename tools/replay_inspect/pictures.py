"""The inspector's pictures: the priority histogram and items' image frames as PNGs."""

from __future__ import annotations

from typing import Any

import numpy as np


def save_histogram_png(s: dict[str, Any], path: str, title: str = "priorities") -> str:
    """Writes the priority histogram as a PNG; returns the path. With shards the
    bars are stacked by shard (their total is the pooled histogram)."""
    import matplotlib  # only when a PNG is asked for: ~1 s of import

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


def save_items_png(items: list[dict[str, Any]], path: str, max_frames: int = 16) -> str:
    """Writes the image frames of `items` (select_items) as one PNG, one row per
    item: its obs stack's frames then its next_obs stack's (Ape-X transitions,
    whichever layout stored them), or the first `max_frames` frames of an R2D2
    sequence's obs; frames are uint8 [..., H, W] grayscale. Returns the path;
    ValueError if the items hold no image frames."""
    from PIL import Image  # only when a PNG is asked for

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
