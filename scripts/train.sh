#!/usr/bin/env bash
# Sets everything up (first run only) and trains Ape-X DQN on CartPole-v1 with
# the default config as a local multi-process Launchpad program.
# Extra arguments go to the entry point, e.g. --config.actor.num_actors=4.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m launch.train --config=configs/apex_cartpole.py "$@"
