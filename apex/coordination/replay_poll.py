"""The replay as the coordinator sees it: every shard's server polled for its
table figures, the totals over the shards, each shard's own figures, and the
files that name the servers for the tools (RUN_DIR/replay_address, and with
shards RUN_DIR/replay_addresses)."""

from __future__ import annotations

import os
from typing import Any

from apex.replay.shards import ADDRESSES_FILE, shard_name
from apex.replay.stats import stats_from_server_info

REPLAY_ADDRESS_FILE = "replay_address"
"""RUN_DIR/replay_address: HOST:PORT of the replay server (shard 0's with shards)."""
REPLAY_ADDRESSES_FILE = (
    ADDRESSES_FILE  # apex.replay.shards: one `<shard_name> <HOST:PORT>` per line
)
"""RUN_DIR/replay_addresses (replay.num_shards > 1 only): one line per shard,
shard s on line s+1, `<shard name> <HOST:PORT>`, e.g. `replay_1 localhost:40123`."""
# The per-shard figures of the metrics rows (replay/shard_<s>/<key>) and of
# summary.json's replay_shards.
SHARD_KEYS = ("size", "inserts", "samples", "samples_per_insert")
# The figures kept of a table's stats (apex.replay.stats.stats_from_server_info).
INFO_KEYS = ("size", "capacity", "inserts", "samples", "samples_per_insert", "unique_samples")
# The counts a shard started again elsewhere carries on from its earlier copies.
CARRIED_KEYS = ("inserts", "samples", "unique_samples")


class ReplayPoller:
    """The replay servers' figures, as of the last `poll`.

    Args:
      replay_client: a reverb.Client of the replay server (None: no replay
        figures), or a list of one per replay shard (shard s at index s).

    Attributes:
      info: the figures (INFO_KEYS) of the program's one table, totals over
        the shards with shards (empty before a poll answered).
      table_stats: the table stats of the last poll (one per shard with shards).
    """

    def __init__(self, replay_client: Any = None):
        if isinstance(replay_client, (list, tuple)):
            self.clients = list(replay_client)
        else:
            self.clients = [] if replay_client is None else [replay_client]
        n = len(self.clients)
        self.shard_names = [shard_name(s, n) for s in range(n)]
        self.info: dict[str, float] = {}
        self.table_stats: list[dict[str, Any]] = []
        # With shards: each shard's table stats (None until its first poll) and
        # figures (INFO_KEYS), shard s at index s.
        self._shard_stats: list[dict[str, Any] | None] = [None] * n
        self._shard_info: list[dict[str, float]] = [{} for _ in self.clients]
        # A shard started again elsewhere (apex.coordination.moves): the counts of
        # its earlier copies, added to its new copy's so that no count goes back.
        self._carried: list[dict[str, float]] = [{} for _ in self.clients]

    @property
    def sharded(self) -> bool:
        """Whether there is more than one replay server (replay.num_shards > 1)."""
        return len(self.clients) > 1

    def write_addresses(self, run_dir: str) -> None:
        """RUN_DIR/replay_address, and with shards RUN_DIR/replay_addresses: for
        tools (python -m tools.replay stats --run_dir=RUN_DIR finds the live server)."""
        if not run_dir or not self.clients:
            return
        address = getattr(self.clients[0], "server_address", None)
        if address:
            with open(os.path.join(run_dir, REPLAY_ADDRESS_FILE), "w") as f:
                f.write(address + "\n")
        if self.sharded:
            lines = [
                f"{name} {getattr(client, 'server_address', '')}\n"
                for name, client in zip(self.shard_names, self.clients)
            ]
            with open(os.path.join(run_dir, REPLAY_ADDRESSES_FILE), "w") as f:
                f.writelines(lines)

    def move(self, shard: int, address: str, run_dir: str = "") -> None:
        """Shard `shard` listens at `address` now (a new copy): polled there from
        now on, its inserts and samples so far carried on, the addresses files
        written again (its lost items are counted by `size` before this)."""
        import reverb  # deferred: the coordinator's module loads without TensorFlow

        last = self._shard_info[shard]
        carried = self._carried[shard]
        for key in CARRIED_KEYS:
            carried[key] = float(last.get(key, carried.get(key, 0.0)) or 0.0)
        self.clients[shard] = reverb.Client(address)
        self.write_addresses(run_dir)

    def size(self, shard: int) -> int:
        """Shard `shard`'s size as of the last poll it answered (0: never)."""
        return int(self._shard_info[shard].get("size", 0) or 0)

    def poll(self) -> None:
        """Asks every server for its figures; a server that does not answer keeps
        its last ones."""
        if not self.clients:
            return
        if self.sharded:
            self._poll_shards()
            return
        try:
            info = self.clients[0].server_info(timeout=2)
        except Exception:  # noqa: BLE001 - the server may be gone at shutdown
            return
        self.table_stats = stats_from_server_info(info)
        if self.table_stats:  # the program's one table
            t = self.table_stats[0]
            self.info = {k: t[k] for k in INFO_KEYS}

    def _poll_shards(self) -> None:
        """Every shard's server_info; a shard that does not answer keeps its last
        figures (the totals are over the last figures of every shard)."""
        for s, client in enumerate(self.clients):
            try:
                stats = stats_from_server_info(client.server_info(timeout=2))
            except Exception:  # noqa: BLE001 - the server may be gone (shutdown, or dead)
                continue
            if stats:  # the shard's one table
                self._shard_stats[s] = stats[0]
                info = {k: stats[0][k] for k in INFO_KEYS}
                for key, value in self._carried[s].items():  # its earlier copies' counts
                    info[key] = info[key] + type(info[key])(value)
                if self._carried[s]:
                    info["samples_per_insert"] = (
                        info["samples"] / info["inserts"] if info["inserts"] else 0.0
                    )
                self._shard_info[s] = info
        known = [i for i in self._shard_info if i]
        if not known:
            return
        total = {
            k: sum(i[k] for i in known)
            for k in ("size", "capacity", "inserts", "samples", "unique_samples")
        }
        total["samples_per_insert"] = (
            total["samples"] / total["inserts"] if total["inserts"] else 0.0
        )
        self.info = total
        self.table_stats = [t for t in self._shard_stats if t is not None]

    def answered(self, shard: int) -> dict[str, Any] | None:
        """Shard `shard`'s table stats as of the last poll it answered (the one
        server's with one), or None while it never answered."""
        if self.sharded:
            return self._shard_stats[shard]
        return self.table_stats[0] if self.table_stats and shard == 0 else None

    def shard_figures(self) -> dict[str, dict[str, Any]]:
        """Each shard's figures by shard name (SHARD_KEYS; None before its first
        poll); empty with one replay server."""
        if not self.sharded:
            return {}
        return {
            name: {k: info.get(k) for k in SHARD_KEYS}
            for name, info in zip(self.shard_names, self._shard_info)
        }

    def shard_rows(self) -> dict[str, Any]:
        """The per-shard metrics columns, replay/shard_<s>/<key> (empty with one server)."""
        row: dict[str, Any] = {}
        for s, info in enumerate(self._shard_info if self.sharded else []):
            for key in SHARD_KEYS:
                row[f"replay/shard_{s}/{key}"] = info.get(key)
        return row

    def shard_sizes_text(self) -> str:
        """Each shard's size for the progress line, ' (1,200+1,180)' ('' with one server)."""
        if not self.sharded:
            return ""
        return " (" + "+".join(f"{i.get('size', 0):,}" for i in self._shard_info) + ")"

    def doctor_tables(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the table's stats, each shard's by name or None without shards): what the
        hang doctor reads (apex.doctor.diagnose)."""
        table = self.table_stats[0] if self.table_stats else None
        shards = dict(zip(self.shard_names, self._shard_stats)) if self.sharded else None
        return table, shards
