"""Shared test set-up: quiet TF, absl flags usable under pytest, helpers."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As launch/train.py: Python's own distutils for Reverb's import (0.35 s less
# CPU per process than setuptools'; test workers and every process they start).
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

import pytest  # noqa: E402
from absl import flags  # noqa: E402


def pytest_configure(config):
    # absltest-based code reads FLAGS (e.g. test_tmpdir); pytest never parses them.
    flags.FLAGS.mark_as_parsed()
    config.addinivalue_line(
        "markers",
        "slow: an in-process test of several seconds, e.g. a variant of a bit-identity "
        "check (CI runs it; the unit subset leaves it out)",
    )


# Rough cost of a test by its markers (seconds on a loaded 2-core CI machine).
_COST = {
    "learning": 70.0,
    "multihost": 90.0,
    "ray": 60.0,
    "integration": 25.0,
    "cli": 5.0,
    "slow": 3.0,
}


def _cost(item) -> float:
    return max([_COST[m.name] for m in item.iter_markers() if m.name in _COST], default=0.3)


def pytest_collection_modifyitems(session, config, items):
    """The longest files first (scripts/test.sh runs one file per worker at a
    time, in this order, with --no-loadscope-reorder): a long file that starts
    last would leave the other worker idle at the end. Within a file, tests
    keep their order; the sort is the same on every worker."""
    cost: dict[str, float] = {}
    for item in items:
        cost[item.nodeid.split("::")[0]] = cost.get(item.nodeid.split("::")[0], 0.0) + _cost(item)
    order = {f: i for i, f in enumerate(sorted(cost, key=lambda f: (-cost[f], f)))}
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])


@pytest.fixture
def small_config():
    """A tiny, fast config (CartPole, 1 actor x 4 envs, small replay)."""
    from apex.config import ApexConfig

    c = ApexConfig()
    c.actor.num_actors = 1
    c.actor.envs_per_actor = 4
    c.replay.capacity = 5_000
    c.replay.min_size = 64
    c.replay.samples_per_insert = 4.0
    c.replay.error_buffer = 1e7  # tests insert and sample by hand: no throttling
    c.learner.batch_size = 32
    c.learner.hidden_sizes = (16, 16)
    c.evaluation.episodes = 2
    c.logging.progress_period_seconds = 0
    return c


@pytest.fixture
def reverb_server(small_config):
    """An in-process Reverb server with the transitions table of small_config."""
    import reverb

    from apex.agents import make_tables
    from apex.envs import env_spec

    server = reverb.Server(make_tables(small_config, env_spec(small_config.env)))
    yield server
    server.stop()
