"""The versions apex is pinned to, and the loud error when one of their private
symbols is missing (every accessor in apex.compat reaches its symbol through
`require`)."""

from __future__ import annotations

from typing import Any

from apex.errors import ApexError


class CompatError(ApexError, RuntimeError):
    """A private symbol apex relies on is missing: the installed version differs
    from the pinned one."""

    def __init__(self, symbol: str, pinned: str, detail: str = ""):
        self.symbol = symbol
        super().__init__(
            f"{symbol} is missing ({pinned} is the version apex is pinned to and tested "
            f"with{'; ' + detail if detail else ''}): reinstall with ./scripts/setup.sh"
        )


REVERB_PIN = "dm-reverb 0.7.0"
LAUNCHPAD_PIN = "dm-launchpad 0.5.0"
TF_PIN = "tensorflow-cpu 2.8.4"


def require(obj: Any, attr: str, symbol: str, pinned: str) -> Any:
    """`obj.attr`, or CompatError naming `symbol` and the `pinned` version."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise CompatError(symbol, pinned) from None
