#!/usr/bin/env bash
# A Ray cluster of hosts with their own addresses on this machine, for trying
# --launcher=ray across hosts (and cutting a host off): N network namespaces
# (anxuserh1..N, 10.77.0.11..) on a private bridge, a Ray head in h1 with the
# resource apex_learner, workers in the others with apex_actor, each started
# with this checkout's .venv `ray` and its own --node-ip-address. Needs root.
#
#   sudo ./scripts/netns-cluster.sh up [--hosts 3] [--no-ray]
#   sudo ./scripts/netns-cluster.sh status
#   sudo ./scripts/netns-cluster.sh down      # kills everything in the namespaces, removes them
#
# `up` prints the command that trains across them (the launcher runs in h1) and
# how to cut a host off (ip link set anxuserv2 down / up). docs/cluster.md,
# "When the network fails". The same harness runs the multihost tests
# (tests/netns.py, tests/test_netns.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m tests.netns "$@"
