"""Launchpad's private symbols apex touches to run a program's nodes under a
launcher of its own (dm-launchpad 0.5.0), and Courier's: what launch.ray_launch
needs of a program that `make_program` built."""

from __future__ import annotations

from typing import Any

from apex.compat.pins import LAUNCHPAD_PIN, CompatError, require

# launch.ray_launch starts the very nodes `make_program` builds, each as
# Launchpad's own node entry (process_entry.py) in a process of its own, the
# way local_mp does, but on the host Ray picks. What it needs of a Launchpad
# 0.5.0 program is reached through these.


def program_groups(program: Any) -> list[tuple[str, list[Any]]]:
    """[(label, [node, ...])] of a Launchpad program, in the order they were added."""
    groups = require(program, "groups", "launchpad Program.groups", LAUNCHPAD_PIN)
    return [(label, list(nodes)) for label, nodes in groups.items()]


class StaticAddress:
    """A Launchpad address builder that returns one fixed `host:port` (what
    `lp.AbstractAddressBuilder` asks of a launch type's builder)."""

    def __init__(self, address: str):
        self.address = address

    def build(self) -> str:
        return self.address


def prepare_nodes(program: Any, program_stopper: Any) -> None:
    """Gives every node the launch context local_mp gives it (LOCAL_MULTI_PROCESSING,
    no launch config) with `program_stopper` as what `lp.stop()` calls in it, and
    lets every handle know its node (as local_mp's launch does before binding)."""
    from launchpad import context

    for _label, nodes in program_groups(program):
        for node in nodes:
            ctx = require(node, "launch_context", "launchpad Node.launch_context", LAUNCHPAD_PIN)
            ctx.initialize(context.LaunchType.LOCAL_MULTI_PROCESSING, None, program_stopper)
    for label, nodes in program_groups(program):
        for node in nodes:
            for handle in node.input_handles:
                handle.connect(node, label)


def bind_node_addresses(node: Any, addresses: list[str]) -> None:
    """Binds each address a node owns or references (`node.addresses`, in order)."""
    owned = list(node.addresses)
    if len(owned) != len(addresses):
        raise ValueError(f"{len(owned)} addresses to bind, {len(addresses)} given")
    for address, value in zip(owned, addresses):
        builder = StaticAddress(value)
        address.bind(builder)


def node_address(node: Any) -> str:
    """HOST:PORT of the first address a node owns, as bound (bind_node_addresses)."""
    return str(require(node, "addresses", "launchpad Node.addresses", LAUNCHPAD_PIN)[0].resolve())


def node_entry(node: Any) -> tuple[bytes, list[str]]:
    """(payload, argv tail): the node's function pickled as local_mp pickles it, and
    the command that runs it once the payload is in a file: argv tail + [path]."""
    import cloudpickle
    from launchpad.launch import serialization

    serialization.enable_lru_cache_pickling_once()
    function = require(node, "function", "launchpad PyNode.function", LAUNCHPAD_PIN)
    return cloudpickle.dumps([function]), [_process_entry(), "--lp_task_id=0", "--data_file"]


def _process_entry() -> str:
    """The path of Launchpad's node entry script (nodes/python/process_entry.py)."""
    import os

    from launchpad.nodes.python import local_multi_processing

    entry = os.path.join(os.path.dirname(local_multi_processing.__file__), "process_entry.py")
    if not os.path.isfile(entry):
        raise CompatError("launchpad nodes/python/process_entry.py", LAUNCHPAD_PIN)
    return entry


def courier_address(client: Any) -> str | None:
    """The 'host:port' a courier client (a dereferenced Launchpad handle) dials,
    which courier.Client keeps private; None for any other object (an in-process
    source, a test's fake)."""
    try:
        from courier.python.client import Client
    except ImportError:
        return None
    if not isinstance(client, Client):
        return None
    address = getattr(client, "_address", None)
    return address if isinstance(address, str) and ":" in address else None


def courier_server(instance: Any, port: int, thread_pool_size: int = 16) -> Any:
    """A started Courier server exposing `instance`'s public methods (what a
    CourierNode serves), through Launchpad's courier_utils; `thread_pool_size`
    calls run at once (courier's default, 16)."""
    from launchpad.nodes.courier import courier_utils

    server = courier_utils.make_courier_server(
        instance, port=port, thread_pool_size=thread_pool_size
    )
    server.Start()
    return server


def check_symbols() -> None:
    """Each symbol above exists in the installed Launchpad (tests/test_compat.py)."""
    import launchpad as lp
    from launchpad.launch import serialization
    from launchpad.nodes.courier import courier_utils
    from launchpad.nodes.python import node as python_node

    require(lp.Program("check"), "groups", "launchpad Program.groups", LAUNCHPAD_PIN)
    require(python_node.PyNode, "launch_context", "launchpad Node.launch_context", LAUNCHPAD_PIN)
    require(python_node.PyNode, "function", "launchpad PyNode.function", LAUNCHPAD_PIN)
    require(
        serialization,
        "enable_lru_cache_pickling_once",
        "launchpad serialization.enable_lru_cache_pickling_once",
        LAUNCHPAD_PIN,
    )
    require(
        courier_utils,
        "make_courier_server",
        "launchpad courier_utils.make_courier_server",
        LAUNCHPAD_PIN,
    )
    _process_entry()
