"""A writer's stream that stopped moving: held by the rate limiter (waiting is
right) or broken (a network partition leaves Reverb's writer so: write anew).

A write that waits for room (apex.replay.writer: TransitionWriter._wait)
watches its stream: after stall_seconds without a confirmation it asks the
server how the table stands (`probe`) and the stream how many of its items are
still unconfirmed (`pending_items`); what it concludes, it raises as
ReplayStalled for the actor (launch.nodes.actor), which goes on with a new
client and writer.
"""

from __future__ import annotations

from typing import Any

from apex.replay.stats import stats_from_server_info

# Each probe of the server is bounded by STALL_PROBE_TIMEOUT seconds.
STALL_PROBE_TIMEOUT = 2
# A working stream held by the rate limiter gets its fair share of the inserts
# the table takes (others_before_broken): STALL_OTHERS_FACTOR shares of
# max_in_flight_items with none of its own is a broken stream.
STALL_OTHERS_FACTOR = 4


class ReplayStalled(RuntimeError):
    """A writer's stream to the replay stopped moving while the server answers and
    its rate limiter would take an insert: the stream is broken (a network
    partition leaves it so: Reverb's writer does not recover). The actor goes on
    with a new client and writer (launch.nodes.actor); `pending` items were
    never confirmed (lost in flight), after `seconds` without a confirmation.
    `moved`: the server does not answer, and its shard was started again
    elsewhere (apex.coordination.moves): the new writer dials its new address."""

    def __init__(
        self, address: str, seconds: float, pending: int, error: str = "", moved: bool = False
    ):
        self.address, self.seconds, self.pending = address, float(seconds), int(pending)
        self.moved = bool(moved)
        why = f"; last stream error {error}" if error else ""
        if moved:
            text = (
                f"the replay at {address} has not answered for {seconds:.0f} s and its shard "
                f"was started again elsewhere ({pending} items unconfirmed)"
            )
        else:
            text = (
                f"the stream to the replay at {address} took no item for {seconds:.0f} s while "
                f"the server answers and would take inserts ({pending} items unconfirmed{why})"
            )
        super().__init__(text)


def probe(client: Any, table: str) -> tuple[str, int | None]:
    """('unreachable', None) when the replay at `client` gave no answer within
    STALL_PROBE_TIMEOUT s; else ('open' if `table` would take an insert now, or
    'held' if its rate limiter holds inserts, waiting being right) and how many
    inserts the table has completed (None if the answer lacks the table)."""
    try:
        info = client.server_info(timeout=STALL_PROBE_TIMEOUT)
    except Exception:  # noqa: BLE001 - no answer: the link or the server is down
        return "unreachable", None
    try:
        stats = {t["table"]: t for t in stats_from_server_info(info)}[table]
        return ("open" if stats["rate_limiter"]["can_insert"] else "held"), int(stats["inserts"])
    except Exception:  # noqa: BLE001 - an answer without our table: not our stream's fault
        return "held", None


def pending_items(stream: Any, max_in_flight: int) -> int:
    """How many of the items written to `stream` (a C++ TrajectoryWriter) the
    server has not confirmed (a bisection of Flush with 1 ms timeouts;
    `max_in_flight` if it errs)."""
    lo, hi = 0, max_in_flight
    try:
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                stream.Flush(mid, 1)
                hi = mid
            except RuntimeError as err:
                if "Timeout exceeded" not in str(err):
                    return max_in_flight
                lo = mid + 1
    except Exception:  # noqa: BLE001 - a count, not worth a failure
        return max_in_flight
    return lo


def others_before_broken(max_in_flight: int, fellow_writers: int) -> int:
    """Items a table may take from other writers while none of one writer's
    pending items is confirmed before its stream counts as broken: each
    writer's fair share (Reverb lets held writers in in turn: measured even
    across 8 writers) is STALL_OTHERS_FACTOR times max_in_flight_items."""
    return STALL_OTHERS_FACTOR * max_in_flight * max(1, int(fellow_writers))
