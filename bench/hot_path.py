r"""Which of apex's files an actor's env step runs through, from the step to its Reverb item.

    .venv/bin/python bench/hot_path.py [--agent apex_dqn|r2d2]

Builds one actor of the agent (CartPole, 4 envs, its own Q-network copy, the
agent's real writer into an in-process Reverb server), warms it up, then
records with `sys.setprofile` every file under apex/ whose functions run during
200 `actor.step()` calls, in the order they are first entered. Prints the count
and the path; issue 26's figure (13 files at 5be3cb0 for both agents, 8 since).
A count, not a timing: the same on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402


class _Weights:
    """A variable source that always serves the same weights (version 1)."""

    def __init__(self, weights: list[np.ndarray]):
        self._weights = weights

    def get_variables(self) -> tuple[int, list[np.ndarray], dict[str, float]]:
        return 1, self._weights, {}


def files_of_a_step(agent: str, steps: int = 200) -> list[str]:
    import reverb

    from apex import ApexConfig, env_spec, slot_epsilons
    from apex.agents import get_builder, make_tables

    c = ApexConfig()
    c.agent = agent
    c.actor.num_actors = 1
    c.actor.envs_per_actor = 4
    c.replay.capacity = 5000
    c.replay.min_size = 64
    c.replay.error_buffer = 1e7
    c.learner.hidden_sizes = (16, 16)
    if agent == "r2d2":
        c.r2d2.sequence_length, c.r2d2.sequence_period = 8, 4
        c.r2d2.burn_in, c.r2d2.lstm_size = 2, 8
    spec = env_spec(c.env)
    builder = get_builder(c)
    server = reverb.Server(make_tables(c, spec))
    client = reverb.Client(f"localhost:{server.port}")
    weights = builder.make_network(c, spec).get_weights()
    eps = slot_epsilons(0, 4, 1, 0.4, 7.0)
    writer = builder.make_writer(client, 0, eps, 0, lambda: False)
    actor = builder.make_actor(c, 0, _Weights(weights), writer)
    for _ in range(50):  # warm-up: first calls, imports, the first items
        actor.step()
    apex_dir = os.path.join(ROOT, "apex", "")
    order: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(apex_dir) and name not in order:
                order.append(name)

    sys.setprofile(profile)
    try:
        for _ in range(steps):
            actor.step()
    finally:
        sys.setprofile(None)
    writer.close()
    server.stop()
    return [os.path.relpath(f, ROOT) for f in order]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agent", default="apex_dqn", choices=("apex_dqn", "r2d2"))
    args = parser.parse_args()
    files = files_of_a_step(args.agent)
    print(f"{args.agent}: an env step crosses {len(files)} files: " + " -> ".join(files))


if __name__ == "__main__":
    main()
