"""Every private or version-specific symbol of Reverb, Launchpad and TensorFlow
that apex touches, in one place: this package.

apex pins dm-reverb 0.7.0, dm-launchpad 0.5.0 and tensorflow-cpu 2.8.4
(pyproject.toml says why). The public APIs of those versions do not offer a
few things apex needs; each is reached here and nowhere else, and each
accessor fails loudly (`CompatError`, naming the symbol and the pinned
version) instead of falling back silently. `tests/test_compat.py` asserts
that every symbol listed in `SYMBOLS` exists with the pinned versions, and
that no module outside this package reaches one.

One module per library, each importing its library only inside the accessor
that needs it (importing apex.compat imports none of them):
    apex/compat/pins.py             the pinned versions, CompatError
    apex/compat/reverb.py           Reverb's C++ TrajectoryWriter
    apex/compat/launchpad.py        local launches: node processes, launchers, flags
    apex/compat/launchpad_nodes.py  a program's nodes under another launcher; Courier
    apex/compat/tensorflow.py       TF 2.8's shared function rendezvous

Modules inside and outside apex use the names below (`from apex import compat`).
"""

from __future__ import annotations

from collections.abc import Callable

from apex.compat import launchpad, launchpad_nodes, reverb, tensorflow
from apex.compat.launchpad import (
    NODE_COLOURS,
    define_launchpad_flags,
    import_launchpad,
    in_launchpad_node_process,
    new_worker_manager,
    node_constructor,
    node_entry_args,
    output_to_files_dir,
    register_forked_process,
    run_node_entry,
    set_node_termination_window,
    set_output_to_files_dir,
    spawn_to_file,
    spawn_with_line_output,
    use_line_output,
    use_node_launcher,
)
from apex.compat.launchpad_nodes import (
    StaticAddress,
    bind_node_addresses,
    courier_address,
    courier_server,
    node_address,
    node_entry,
    prepare_nodes,
    program_groups,
)
from apex.compat.pins import LAUNCHPAD_PIN, REVERB_PIN, TF_PIN, CompatError
from apex.compat.reverb import reverb_trajectory_writer
from apex.compat.tensorflow import share_function_rendezvous

# Every symbol above, by library, as its check against the installed packages
# (tests/test_compat.py runs each).
SYMBOLS: dict[str, Callable[[], None]] = {
    "reverb": reverb.check_symbols,
    "launchpad": launchpad.check_symbols,
    "launchpad_nodes": launchpad_nodes.check_symbols,
    "tensorflow": tensorflow.check_symbols,
}

__all__ = [
    "LAUNCHPAD_PIN",
    "NODE_COLOURS",
    "REVERB_PIN",
    "SYMBOLS",
    "TF_PIN",
    "CompatError",
    "StaticAddress",
    "bind_node_addresses",
    "courier_address",
    "courier_server",
    "define_launchpad_flags",
    "import_launchpad",
    "in_launchpad_node_process",
    "new_worker_manager",
    "node_address",
    "node_constructor",
    "node_entry",
    "node_entry_args",
    "output_to_files_dir",
    "prepare_nodes",
    "program_groups",
    "register_forked_process",
    "reverb_trajectory_writer",
    "run_node_entry",
    "set_node_termination_window",
    "set_output_to_files_dir",
    "share_function_rendezvous",
    "spawn_to_file",
    "spawn_with_line_output",
    "use_line_output",
    "use_node_launcher",
]
