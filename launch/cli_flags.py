"""The launcher's command line beyond absl: the launch types apex runs, when the
modules that define more flags must be imported before parsing, and a hint for
a config field given as a flag."""

from __future__ import annotations

import importlib
import sys

from absl import flags

from apex import ApexConfig, compat

# The launch types apex runs (Launchpad lists more: local_docker is unimplemented
# in 0.5.0, vertex_ai needs Google Cloud, test_mp needs a test case).
SUPPORTED_LAUNCH_TYPES = ("local_mp", "local_mt")

# With Launchpad's package, what define the absl flags a command line may name
# beyond apex's and Launchpad's own: acme (--acme_id, absl's logging and testing
# flags) and Reverb (TensorFlow's). launch.train imported them at start before
# those imports were deferred (apex.compat.define_launchpad_flags, launch.train._launch).
_FLAG_DEFINING_MODULES = ("acme", "reverb")


def only_defined_flags(args: list[str]) -> bool:
    """Whether every flag `args` names (--name, --name=v, --noname) is defined now,
    and none lists every flag (--helpfull, --helpxml) or reads flags from a file.

    When not, launch.train.parse_flags imports Launchpad and _FLAG_DEFINING_MODULES
    first: a flag only they define parses, an unknown one gets absl's suggestions
    from every flag, and --helpfull lists them all, as when they were imported at
    start. A refused config names only apex's and Launchpad's flags, and skips
    those imports.
    """
    for arg in args:
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name = arg.lstrip("-").split("=", 1)[0]
        if name in ("helpfull", "helpxml", "flagfile", "undefok"):
            return False
        if name in flags.FLAGS:
            continue
        if name.startswith("no") and name[2:] in flags.FLAGS and flags.FLAGS[name[2:]].boolean:
            continue
        return False
    return True


# absl's help flags print their text and exit 1; a user's script expects 0.
HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")


def asks_for_help(args: list[str]) -> bool:
    """Whether `args` (argv without the program) names one of absl's help flags."""
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and arg.lstrip("-").split("=", 1)[0] in HELP_FLAGS:
            return True
    return False


def parse_absl_flags(argv: list[str]) -> list[str]:
    """absl's flags.FLAGS(argv), where a help flag exits 0 after its text (absl: 1)."""
    try:
        return flags.FLAGS(argv)
    except SystemExit as stop:
        if stop.code == 1 and asks_for_help(argv[1:]):
            sys.exit(0)
        raise


def import_flag_defining_modules() -> None:
    compat.import_launchpad()
    for name in _FLAG_DEFINING_MODULES:
        importlib.import_module(name)


def launch_types_text() -> str:
    return f"one of {', '.join(SUPPORTED_LAUNCH_TYPES)} (apex supports these launch types)"


def flag_hint(message: str, argv: list[str]) -> str:
    """'; did you mean --config.actor.num_actors=4?' for a config field given as a flag."""
    import re

    match = re.search(r"Unknown command line flag '([^']+)'", message)
    if not match:
        return ""
    name = match.group(1)
    fields = [
        f"{section}.{field}"
        for section, value in vars(ApexConfig()).items()
        for field in (vars(value) if hasattr(value, "__dataclass_fields__") else {})
        if field == name
    ] + [k for k in vars(ApexConfig()) if k == name]
    if not fields:
        return ""
    value = next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), "...")
    return "; did you mean " + " or ".join(f"--config.{f}={value}" for f in fields) + "?"
