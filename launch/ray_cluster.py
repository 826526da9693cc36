"""A multi-node Ray cluster simulated on this machine, for trying `--launcher=ray`.

    .venv/bin/python -m launch.ray_cluster [--nodes 3] [--head_cpus 2] [--worker_cpus 2]

Starts Ray's own multi-node simulation (ray.cluster_utils.Cluster: a GCS and
one raylet per node): a head node with the custom resource 'apex_learner' and
`--nodes - 1` worker nodes with 'apex_actor'. Prints one line,
`ray_address=HOST:PORT`, then keeps the cluster up until SIGINT/SIGTERM, or
until the process named by --parent_pid exits (how `--ray_simulate_nodes`
uses it: the launcher starts this in a session of its own, so a Ctrl-C in the
terminal reaches the launcher, which stops the program in order, and not the
cluster under it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

HEAD_RESOURCE = "apex_learner"
WORKER_RESOURCE = "apex_actor"
ADDRESS_PREFIX = "ray_address="


def start(num_nodes: int, head_cpus: int, worker_cpus: int):
    """The started ray.cluster_utils.Cluster (all nodes registered)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": head_cpus,
            "resources": {HEAD_RESOURCE: 1},
            "include_dashboard": False,
        },
    )
    for _ in range(num_nodes - 1):
        cluster.add_node(num_cpus=worker_cpus, resources={WORKER_RESOURCE: 1})
    cluster.wait_for_nodes()
    return cluster


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3, help="Ray nodes, the head included (>= 2)")
    ap.add_argument("--head_cpus", type=int, default=2, help="logical CPUs of the head node")
    ap.add_argument("--worker_cpus", type=int, default=2, help="logical CPUs of each worker")
    ap.add_argument("--parent_pid", type=int, default=0, help="shut down when this pid exits")
    args = ap.parse_args(argv)
    if args.nodes < 2:
        print("ray_cluster: --nodes must be >= 2 (a head and workers)", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    cluster = start(args.nodes, args.head_cpus, args.worker_cpus)
    try:
        print(f"{ADDRESS_PREFIX}{cluster.address}", flush=True)
        while not done.wait(1.0):
            if args.parent_pid and not _alive(args.parent_pid):
                break
    finally:
        cluster.shutdown()
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    sys.exit(main())
