"""Names a package face loads on first use (PEP 562), so that importing the face
stays light: `apex`, `apex.replay` and `apex.agents` list their TensorFlow,
Reverb, Launchpad or gymnasium names here instead of importing them.

    >>> __getattr__, __dir__ = lazy_names(globals(), {"Learner": "apex.learner"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(
    namespace: dict[str, Any], lazy: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(module __getattr__, module __dir__) for a face whose globals are `namespace`
    and whose `lazy` names (name -> defining module) are imported on first use."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
