"""The transition writer and the learner's dataset against a real (in-process) Reverb server."""

import numpy as np
import reverb

from apex.agents import TRANSITIONS_TABLE
from apex.replay.dataset import make_dataset
from apex.replay.tables import (
    row_signature,
    transition_signature,
    unpack_item,
    unpack_transitions,
)
from apex.replay.writer import TransitionWriter
from tests.procs import wait_until


def batch_of(n, version=3):
    obs = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return {
        "obs": obs,
        "action": np.arange(n, dtype=np.int32) % 2,
        "reward": np.full(n, 2.5, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "next_obs": obs + 1,
        "slot": np.arange(n, dtype=np.int32) % 4,
        "version": np.full(n, version, np.int64),
        "td": np.zeros(n, np.float32),
    }


def test_writer_inserts_one_item_per_transition_with_its_priority_and_provenance(reverb_server):
    client = reverb.Client(f"localhost:{reverb_server.port}")
    eps = np.array([0.4, 0.1, 0.01, 0.001], np.float32)
    with TransitionWriter(client, TRANSITIONS_TABLE, actor_id=2, epsilons=eps, slot_offset=8) as w:
        w.write(batch_of(80), np.linspace(1.0, 80.0, 80))  # above min_size (64): sampling allowed
    info = client.server_info()[TRANSITIONS_TABLE]
    assert info.current_size == 80
    samples = list(
        client.sample(
            TRANSITIONS_TABLE,
            num_samples=200,
            emit_timesteps=False,
            unpack_as_table_signature=True,
        )
    )
    for s in samples:
        d = unpack_item(s.data)
        row = int(d["obs"][0]) // 4
        assert s.info.priority == np.linspace(1.0, 80.0, 80)[row]
        assert int(d["actor"]) == 2 and int(d["slot"]) == 8 + row % 4
        assert float(d["epsilon"]) == eps[row % 4]
        assert int(d["version"]) == 3 and float(d["reward"]) == 2.5
        np.testing.assert_array_equal(d["next_obs"], d["obs"] + 1)
        assert d["action"].dtype == np.int32 and int(d["action"]) == row % 2
        assert d["version"].dtype == np.int64 and d["insert_time"].dtype == np.float64
    # Higher priority is sampled more often (alpha = 0.6).
    rows = [int(unpack_item(s.data)["obs"][0]) // 4 for s in samples]
    assert np.mean(rows) > 39.5


def test_dataset_yields_batches_of_the_signature_with_sample_info(reverb_server, small_config):
    from apex.envs import env_spec

    client = reverb.Client(f"localhost:{reverb_server.port}")
    with TransitionWriter(
        client, TRANSITIONS_TABLE, actor_id=0, epsilons=np.full(4, 0.1, np.float32)
    ) as w:
        w.write(
            batch_of(small_config.replay.min_size + 10), np.ones(small_config.replay.min_size + 10)
        )
    sig = client.server_info()[TRANSITIONS_TABLE].signature  # the builder's layout (one row)
    assert sig == row_signature(env_spec(small_config.env))
    import functools

    import tensorflow as tf

    ds = make_dataset(
        f"localhost:{reverb_server.port}",
        sig,
        batch_size=16,
        num_workers=2,
        prefetch=1,
        table=TRANSITIONS_TABLE,
        transform=functools.partial(unpack_transitions, xp=tf),
    )
    sample = next(iter(ds))
    assert sample.data["obs"].shape == (16, 4) and sample.data["action"].shape == (16,)
    assert sample.data["action"].dtype.name == "int32"
    assert sample.data["version"].dtype.name == "int64"
    assert sample.data["insert_time"].dtype.name == "float64"
    np.testing.assert_array_equal(sample.data["next_obs"], sample.data["obs"] + 1)
    assert sample.info.key.shape == (16,) and sample.info.probability.shape == (16,)
    assert int(sample.info.table_size[0]) == small_config.replay.min_size + 10


def test_writer_held_by_the_rate_limiter_waits_then_returns_at_a_stop():
    """While the rate limiter holds inserts, write() waits with at most
    max_in_flight_items unconfirmed; a stop request ends the wait (no hang) and
    close() reports the items it could not deliver."""
    import threading

    from apex.agents import make_tables
    from apex.config import ApexConfig
    from apex.envs import env_spec

    c = ApexConfig()
    c.replay.min_size = 10
    c.replay.samples_per_insert = 1.0
    c.replay.error_buffer = 5.0  # inserts stop ~15 items in, nothing samples
    server = reverb.Server(make_tables(c, env_spec(c.env)))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        stop = threading.Event()
        w = TransitionWriter(
            client,
            TRANSITIONS_TABLE,
            0,
            np.full(4, 0.1, np.float32),
            max_in_flight_items=8,
            should_stop=stop.is_set,
        )

        def stop_once_held() -> None:  # the limiter has let in all it will
            wait_until(
                lambda: client.server_info()[TRANSITIONS_TABLE].current_size >= 10,
                60,
                "inserts up to the rate limiter's bound",
            )
            stop.set()

        threading.Thread(target=stop_once_held, daemon=True).start()
        w.write(batch_of(64), np.ones(64))
        assert stop.is_set()  # held until the stop, then returned
        assert w.items_written == 64
        size = client.server_info()[TRANSITIONS_TABLE].current_size
        assert 10 <= size <= 16  # what the rate limiter let in
        assert w.close(timeout=0.5) is False  # the rest could not be confirmed
    finally:
        server.stop()


def test_both_transition_layouts_give_back_every_field_exactly_in_numpy_and_tensorflow(
    small_config,
):
    """replay.transition_layout 'auto' (one float64 row per item on CartPole's
    vector) and 'columns' (three columns) store the same values: a sampled item
    unpacks to the same fields, dtypes included, in the tools (numpy) and in
    the learner's input (TensorFlow)."""
    import functools

    import tensorflow as tf

    from apex.agents import make_tables
    from apex.envs import env_spec

    eps = np.array([0.4, 0.1, 0.01, 0.001], np.float32)
    seen = {}
    for layout in ("auto", "columns"):
        small_config.replay.transition_layout = layout
        spec = env_spec(small_config.env)
        server = reverb.Server(make_tables(small_config, spec))
        try:
            client = reverb.Client(f"localhost:{server.port}")
            sig = client.server_info()[TRANSITIONS_TABLE].signature
            expected = row_signature(spec) if layout == "auto" else transition_signature(spec)
            assert sig == expected
            with TransitionWriter(client, TRANSITIONS_TABLE, 2, eps, slot_offset=8) as w:
                w.write(batch_of(80), np.ones(80))
            (s,) = client.sample(
                TRANSITIONS_TABLE,
                num_samples=1,
                emit_timesteps=False,
                unpack_as_table_signature=True,
            )
            d = unpack_item(s.data)
            row = int(d["obs"][0]) // 4
            np.testing.assert_array_equal(d["obs"], np.arange(4 * row, 4 * row + 4))
            np.testing.assert_array_equal(d["next_obs"], d["obs"] + 1)
            assert int(d["actor"]) == 2 and int(d["slot"]) == 8 + row % 4
            assert float(d["epsilon"]) == eps[row % 4] and float(d["discount"]) == np.float32(0.99)
            seen[layout] = {k: (np.asarray(v).dtype, np.asarray(v).shape) for k, v in d.items()}
            ds = make_dataset(
                f"localhost:{server.port}",
                sig,
                batch_size=8,
                prefetch=0,
                table=TRANSITIONS_TABLE,
                transform=functools.partial(unpack_transitions, xp=tf),
            )
            batch = next(iter(ds)).data
            np.testing.assert_array_equal(batch["next_obs"], batch["obs"] + 1)
            assert {k: v.dtype.name for k, v in batch.items()} == {
                k: dtype.name for k, (dtype, _) in seen[layout].items()
            }
        finally:
            server.stop()
    assert seen["auto"] == seen["columns"]
    assert seen["auto"]["obs"][0] == np.float32 and seen["auto"]["action"][0] == np.int32


def test_a_checkpoint_of_three_columns_is_refused_naming_transition_layout_columns(small_config):
    from apex.checkpointing import compatibility_problems
    from apex.config import to_dict
    from apex.envs import env_spec

    spec = env_spec(small_config.env)
    sig = {
        "columns": {k: str(v) for k, v in transition_signature(spec).items()},
        "auto": {k: str(v) for k, v in row_signature(spec).items()},
    }
    config = to_dict(small_config)
    saved = {"config": config, "table": {"signature": sig["columns"]}}
    current = {"config": config, "table": {"signature": sig["auto"]}}
    (problem,) = compatibility_problems(saved, current)
    assert "resume it with --config.replay.transition_layout=columns" in problem
