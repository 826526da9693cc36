"""Items of a replay checkpoint: their columns, and picking and decoding a few.

`item_table` gives every item of a table as columns (key, priority, times
sampled, age at the checkpoint, and the provenance its payload carries: actor,
slot, epsilon, parameter version, insert time); `pooled_item_table` the same
over several shards with a `shard` column. `select_items` / `select_shard_items`
decode N items (newest, oldest, top, bottom or random) with their payloads;
`items_to_json` and `save_items_npz` write them out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.replay_inspect.checkpoint_reader import iter_items
from tools.replay_inspect.sources import checkpoint_time

PROVENANCE = ("actor", "slot", "epsilon", "version", "insert_time")


def item_table(path: str, table: str, provenance: bool = True) -> dict[str, np.ndarray]:
    """Columns of every item of `table` in a checkpoint: key, priority,
    times_sampled, inserted_at, age_seconds (at the checkpoint), and with
    `provenance` the items' actor, slot, epsilon, version and insert_time."""
    from apex.replay import unpack_item  # Reverb and TensorFlow: only to decode items

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
    from apex.replay import unpack_item  # Reverb and TensorFlow: only to decode items

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
