"""Helpers for tests that step a program's nodes by hand (as Acme's integration tests do)."""

from __future__ import annotations

import launchpad as lp

from apex import compat


def find_nodes(program: lp.Program, node_class: type) -> list:
    """The CourierNodes of `program` built from `node_class`, inside colocations too.

    Example (as in Acme's integration tests):
        >>> (learner,) = find_nodes(program, LearnerNode)
        >>> learner.disable_run()
    """
    found = []
    stack = list(program.get_all_nodes())
    while stack:
        node = stack.pop()
        if isinstance(node, lp.MultiThreadingColocation):
            stack.extend(node.nodes)
        elif isinstance(node, lp.CourierNode) and compat.node_constructor(node) is node_class:
            found.append(node)
    return found
