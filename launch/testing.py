"""Helpers for tests that step a program's nodes by hand (as Acme's integration tests do)."""

from __future__ import annotations

from typing import Any

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


def launch_stepped(program: lp.Program, test_case: Any, learner_class: type) -> Any:
    """Launches `program` in threads (test_mt) with its learner's run disabled, so
    a test steps it by hand; returns the learner's handle.

    Everything the launch started is closed by `test_case`'s cleanups: the
    learner's own threads (heartbeat, priority updates) first, through its
    `close` RPC, then Launchpad's threads. A test leaves no thread behind.
    """
    (learner_node,) = find_nodes(program, learner_class)
    learner_node.disable_run()
    lp.launch(program, launch_type="test_mt", test_case=test_case)
    learner = learner_node.create_handle().dereference()
    test_case.addCleanup(learner.close)  # cleanups run last-in first-out: before Launchpad's
    return learner
