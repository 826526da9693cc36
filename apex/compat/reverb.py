"""Reverb's private symbols apex touches (dm-reverb 0.7.0): its C++ TrajectoryWriter."""

from __future__ import annotations

from typing import Any

from apex.compat.pins import REVERB_PIN, CompatError, require


def reverb_trajectory_writer(
    client: Any, chunk_length: int, signature_timeout_ms: int, keep_alive: int | None = None
) -> Any:
    """Reverb's C++ TrajectoryWriter (`reverb.pybind`) on `client`'s connection.

    Why not the public `reverb.TrajectoryWriter`: its Python layer builds a
    history of column references per step (a few tens of microseconds per
    env step, measured in bench/components.py); apex writes pre-packed steps
    and needs none of it. Reached through `reverb.pybind.ConstantChunkerOptions`
    and `reverb.Client._client.NewTrajectoryWriter`, both private in 0.7.0.
    """
    from reverb import pybind

    options = require(
        pybind, "ConstantChunkerOptions", "reverb.pybind.ConstantChunkerOptions", REVERB_PIN
    )
    cpp_client = require(client, "_client", "reverb.Client._client", REVERB_PIN)
    new_writer = require(
        cpp_client, "NewTrajectoryWriter", "reverb.Client._client.NewTrajectoryWriter", REVERB_PIN
    )
    keep = max(int(chunk_length), int(keep_alive or 0))  # each column's newest refs kept usable
    return new_writer(options(int(chunk_length), keep), int(signature_timeout_ms))


def check_symbols() -> None:
    """Each symbol above exists in the installed Reverb (tests/test_compat.py)."""
    import reverb
    from reverb import pybind

    require(pybind, "ConstantChunkerOptions", "reverb.pybind.ConstantChunkerOptions", REVERB_PIN)
    require(
        pybind.Client, "NewTrajectoryWriter", "reverb.pybind.Client.NewTrajectoryWriter", REVERB_PIN
    )
    if "_client" not in reverb.Client.__init__.__code__.co_names:
        raise CompatError("reverb.Client._client", REVERB_PIN)
