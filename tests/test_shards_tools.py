"""tools.replay and tools.status over a sharded replay (replay.num_shards = 2):
two real Reverb servers with the tables of shard_config, filled by real actors
(actor i writes to shard i % 2), a RUN_DIR as a sharded run leaves it
(config.json, replay_address, replay_addresses) and a run checkpoint with
replay_0/ and replay_1/. Every figure is checked against the servers' own
server_info and against what each actor wrote; offline (the checkpoint) gives
the same numbers as live."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import reverb

from apex.agents import TRANSITIONS_TABLE, make_tables
from apex.config import ApexConfig, to_dict
from apex.envs import env_spec
from apex.exploration import slot_epsilons
from apex.replay.shards import shard_config, shard_name, shard_of_actor
from apex.replay.writer import TransitionWriter
from tests.fakes import FakeVariableSource
from tests.procs import run_tool_lines
from tools import replay_inspect as inspect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = 2
NUM_ACTORS = 4
SAMPLED = {0: 5, 1: 3}  # shard -> items the "learner" drew from it
NAMES = [shard_name(s, S) for s in range(S)]


def sharded_config() -> ApexConfig:
    c = ApexConfig()
    c.actor.num_actors = NUM_ACTORS
    c.actor.envs_per_actor = 2
    c.replay.capacity = 5_000
    c.replay.min_size = 2
    c.replay.samples_per_insert = 4.0
    c.replay.error_buffer = 1e7  # inserts and samples by hand: no throttling
    c.replay.num_shards = S
    c.learner.hidden_sizes = (16, 16)
    return c


def fill_actor(client: reverb.Client, config: ApexConfig, actor_id: int, n: int) -> int:
    """A real actor writes at least `n` items; returns how many it wrote."""
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.dqn.networks import QNetwork

    source = FakeVariableSource(
        QNetwork(4, 2, config.learner.hidden_sizes, seed=1).get_weights(), version=actor_id
    )
    eps = slot_epsilons(
        actor_id,
        config.actor.envs_per_actor,
        config.actor.num_actors,
        config.actor.epsilon_base,
        config.actor.epsilon_alpha,
    )
    with TransitionWriter(client, TRANSITIONS_TABLE, actor_id, eps) as w:
        actor = VectorActor(config, actor_id, source, w)
        while actor.items_written < n:
            actor.step()
        actor.close()
    return actor.items_written


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Two live shards, a RUN_DIR naming them and a run checkpoint of both."""
    d = tmp_path_factory.mktemp("sharded")
    run_dir = d / "run"
    run_dir.mkdir()
    config = sharded_config()
    spec = env_spec(config.env)
    servers = [
        reverb.Server(
            make_tables(shard_config(config), spec),
            checkpointer=reverb.checkpointers.DefaultCheckpointer(
                path=str(run_dir / "replay_checkpoints" / NAMES[s])
            ),
        )
        for s in range(S)
    ]
    addresses = [f"localhost:{srv.port}" for srv in servers]
    clients = [reverb.Client(a) for a in addresses]
    written = {
        i: fill_actor(clients[shard_of_actor(i, S)], config, i, 12 + 6 * i)
        for i in range(NUM_ACTORS)
    }
    for s, n in SAMPLED.items():
        list(clients[s].sample(TRANSITIONS_TABLE, num_samples=n, emit_timesteps=False))
    (run_dir / "config.json").write_text(json.dumps(to_dict(config)))
    (run_dir / "replay_address").write_text(addresses[0] + "\n")
    (run_dir / "replay_addresses").write_text(
        "".join(f"{NAMES[s]} {addresses[s]}\n" for s in range(S))
    )
    # A run checkpoint as the coordinator writes it: one Reverb checkpoint per shard.
    ckpt = run_dir / "checkpoints" / "ckpt-000000000"
    ckpt.mkdir(parents=True)
    for s in range(S):
        shutil.move(clients[s].checkpoint(), ckpt / NAMES[s])
    (ckpt / "manifest.json").write_text(json.dumps({"format": 1, "config": to_dict(config)}))
    (ckpt / "COMPLETE").write_text("")
    yield {
        "servers": servers,
        "clients": clients,
        "addresses": addresses,
        "run_dir": str(run_dir),
        "ckpt": str(ckpt),
        "written": written,
    }
    for srv in servers:
        srv.stop()


def info(sharded, s):
    """Shard s's own table info: (size, inserts, samples, capacity)."""
    t = sharded["clients"][s].server_info()[TRANSITIONS_TABLE]
    rl = t.rate_limiter_info
    return (
        int(t.current_size),
        int(rl.insert_stats.completed),
        int(rl.sample_stats.completed),
        int(t.max_size),
    )


def expected_per_shard(written):
    return {
        NAMES[s]: sum(n for a, n in written.items() if shard_of_actor(a, S) == s) for s in range(S)
    }


# ------------------------------------------------------------------ library


def test_every_shard_holds_what_its_actors_wrote(sharded):
    per = expected_per_shard(sharded["written"])
    for s in range(S):
        size, inserts, samples, capacity = info(sharded, s)
        assert size == inserts == per[NAMES[s]]
        assert samples == SAMPLED[s] and capacity == 5_000 // S


def test_library_totals_and_pooled_views_match_the_servers(sharded):
    shards = [
        {"shard": NAMES[s], "tables": inspect.table_stats(sharded["clients"][s])} for s in range(S)
    ]
    (total,) = inspect.total_stats([sh["tables"] for sh in shards])
    sizes = [info(sharded, s) for s in range(S)]
    assert total["size"] == sum(x[0] for x in sizes)
    assert total["inserts"] == sum(x[1] for x in sizes)
    assert total["samples"] == sum(SAMPLED.values())
    assert total["capacity"] == 5_000 and total["shards"] == S
    assert total["can_sample_shards"] == S and total["can_insert_shards"] == S
    text = inspect.format_shard_stats(shards)
    assert f"total over 2/2 shards: table transitions: {total['size']:,}/5,000 items" in text
    # Item-level views over the run checkpoint's shards.
    found = inspect.resolve_shards(sharded["ckpt"])
    assert [name for name, _ in found] == NAMES
    cols = inspect.pooled_item_table(found, TRANSITIONS_TABLE)
    assert len(cols["key"]) == total["size"]
    # Every item is in the shard its actor writes to.
    assert all(
        sh == shard_name(shard_of_actor(int(a), S), S)
        for sh, a in zip(cols["shard"], cols["actor"])
    )
    assert cols["times_sampled"].sum() == sum(SAMPLED.values())
    b = inspect.breakdown(cols, (0.01, 0.1), 5, num_shards=S)
    assert {r["group"]: r["count"] for r in b["actor"]} == {
        f"actor {a}": n for a, n in sharded["written"].items()
    }
    for r in b["actor"]:
        assert r["shards"] == [r["expected_shard"]]
    assert {r["group"]: r["count"] for r in b["shard"]} == expected_per_shard(sharded["written"])
    assert b["total"][0]["count"] == total["size"]
    summary = inspect.priority_summary(cols, k=3, bins=6, shards=NAMES)
    per_bin = np.sum([r["counts"] for r in summary["shards"]], axis=0)
    assert per_bin.tolist() == summary["histogram"]["counts"]
    items = inspect.select_shard_items(found, TRANSITIONS_TABLE, 10, "top")
    assert [round(it["priority"], 6) for it in items] == [
        round(r, 6) for r in sorted(cols["priority"], reverse=True)[:10]
    ]
    for it in items:
        assert it["shard"] == shard_name(shard_of_actor(int(it["data"]["actor"]), S), S)


def test_status_shows_every_shard(sharded):
    from tools.status import format_status, status

    s = status(sharded["run_dir"], stall_seconds=30.0)
    assert [sh["shard"] for sh in s["replay_shards"]] == NAMES
    for sh, address, x in zip(
        s["replay_shards"], sharded["addresses"], [info(sharded, i) for i in range(S)]
    ):
        assert sh["address"] == address and sh["table"]["size"] == x[0]
    assert s["replay"]["size"] == sum(info(sharded, i)[0] for i in range(S))
    text = format_status(s)
    assert "replay: 2 shards (actor i writes to shard i % 2)" in text
    for name, address in zip(NAMES, sharded["addresses"]):
        assert f"shard {name} at {address}" in text
    assert "total over 2/2 shards" in text


def test_status_doctor_reads_each_node_against_its_shard(sharded, tmp_path):
    from apex import heartbeat as hb
    from tools.status import format_status, status

    run_dir = str(tmp_path)
    for name in ("config.json", "replay_address", "replay_addresses"):
        shutil.copy(os.path.join(sharded["run_dir"], name), run_dir)
    store = hb.HeartbeatStore(run_dir)
    for node, state in (("actor_1", hb.INSERTING), ("learner", hb.TRAINING), ("replay_0", hb.IDLE)):
        beat = hb.Heartbeat(None, node)
        beat.enter(state)
        store.record(beat.beat())
    s = status(run_dir, stall_seconds=0.0)  # every state counts as held
    findings = {f["node"]: f for f in s["findings"]}
    assert findings["actor_1"]["reason"] == "actor_blocked_on_insert"
    assert findings["actor_1"]["message"].startswith("replay_1: ")  # actor 1 writes to shard 1
    assert findings["learner"]["reason"] == "learner_waiting_for_samples"
    assert "replay_0: " in findings["learner"]["message"]
    assert "replay_1: " in findings["learner"]["message"]
    (shard0,) = [sh for sh in s["replay_shards"] if sh["shard"] == "replay_0"]
    assert shard0["heartbeat"]["alive"] and shard0["heartbeat"]["state"] == hb.IDLE
    assert f"shard replay_0 at {sharded['addresses'][0]} (heartbeat" in format_status(s)
    # A shard that is gone is reported as such; the others still are.
    with open(os.path.join(run_dir, "replay_addresses"), "w") as f:
        f.write(f"replay_0 {sharded['addresses'][0]}\nreplay_1 localhost:1\n")
    s = status(run_dir, stall_seconds=30.0)
    assert s["replay_shards"][1]["table"] is None
    assert s["replay"]["size"] == info(sharded, 0)[0] and s["replay"]["shards"] == 1
    text = format_status(s)
    assert "shard replay_1 at localhost:1: not reachable" in text
    assert "total over 1/2 shards: table transitions" in text


# ---------------------------------------------------------------------- CLI


def run_cli(*commands: list[str]) -> list[str]:
    """Runs each tools.replay command line in one helper process; their stdouts."""
    results = run_tool_lines("tools.replay", list(commands))
    for r in results:
        assert r["rc"] == 0, (r["argv"], r["stderr"][-3000:])
    return [r["stdout"] for r in results]


@pytest.mark.cli
@pytest.mark.timeout(600)
def test_cli_covers_every_shard_live_and_offline(sharded, tmp_path):
    run = f"--run_dir={sharded['run_dir']}"
    servers = "--server=" + ",".join(sharded["addresses"])
    ckpt = f"--checkpoint={sharded['ckpt']}"
    png = str(tmp_path / "prio.png")
    before = [info(sharded, s) for s in range(S)]
    total = sum(x[0] for x in before)
    (
        stats_json,
        stats_text,
        server_stats_json,
        prio_json,
        prio_text,
        items_json,
        items_shard1,
        breakdown_json,
        breakdown_text,
        watch_text,
        off_stats_json,
        off_breakdown_json,
        off_items_json,
    ) = run_cli(
        ["stats", run, "--json"],
        ["stats", run],
        ["stats", servers, "--json"],
        ["priorities", run, "--json", "--k=3", "--bins=5", f"--png={png}"],
        ["priorities", run, "--k=2", "--bins=3"],
        ["items", run, f"--n={total}", "--order=top"],
        ["items", servers, "--n=1000", "--order=oldest", "--shard=1"],
        ["breakdown", run, "--json"],
        ["breakdown", run],
        ["watch", run, "--count=1"],
        ["stats", ckpt, "--json"],
        ["breakdown", ckpt, "--json"],
        ["items", ckpt, f"--n={total}", "--order=top"],
    )
    # Inspecting sampled nothing on any shard.
    assert [info(sharded, s) for s in range(S)] == before
    per = expected_per_shard(sharded["written"])

    # stats: each shard as its server reports it, and the total.
    for out in (json.loads(stats_json), json.loads(server_stats_json)):
        assert out["num_shards"] == S
        assert [sh["shard"] for sh in out["shards"]] == NAMES
        for s, sh in enumerate(out["shards"]):
            (t,) = sh["tables"]
            assert sh["address"] == sharded["addresses"][s]
            assert (t["size"], t["inserts"], t["samples"], t["capacity"]) == before[s]
        (tot,) = out["total"]
        assert tot["size"] == total == sum(per.values())
        assert tot["samples"] == sum(SAMPLED.values()) and tot["capacity"] == 5_000
    for s, name in enumerate(NAMES):
        assert f"shard {name} at {sharded['addresses'][s]}" in stats_text
        assert f"table transitions: {before[s][0]:,}/2,500 items" in stats_text
    assert f"total over 2/2 shards: table transitions: {total:,}/5,000 items" in stats_text

    # priorities: pooled, with every shard's part.
    prio = json.loads(prio_json)
    assert prio["count"] == total and prio["num_shards"] == S
    assert [(r["shard"], r["count"]) for r in prio["shards"]] == [(n, per[n]) for n in NAMES]
    assert (
        np.sum([r["counts"] for r in prio["shards"]], axis=0).tolist()
        == (prio["histogram"]["counts"])
    )
    assert all("shard" in r for r in prio["top"] + prio["bottom"])
    assert os.path.getsize(png) > 1000 and open(png, "rb").read(4) == b"\x89PNG"
    assert f"{total:,} items; priority min" in prio_text
    for name in NAMES:
        assert f"  {name}: {per[name]:,} items" in prio_text

    # items: each from the shard its actor writes to; --shard keeps one shard.
    items = json.loads(items_json)
    assert len(items) == total
    for it in items:
        assert it["shard"] == shard_name(shard_of_actor(it["data"]["actor"], S), S)
    assert {n: sum(it["shard"] == n for it in items) for n in NAMES} == per
    one = json.loads(items_shard1)
    assert len(one) == per["replay_1"] and {it["shard"] for it in one} == {"replay_1"}
    assert {it["data"]["actor"] for it in one} == {1, 3}

    # breakdown: per actor what it wrote, per shard its size, the total.
    b = json.loads(breakdown_json)
    assert {r["group"]: r["count"] for r in b["actor"]} == {
        f"actor {a}": n for a, n in sharded["written"].items()
    }
    for r in b["actor"]:
        a = int(r["group"].split()[1])
        assert r["shards"] == [r["expected_shard"]] == [NAMES[a % S]]
    assert {r["group"]: r["count"] for r in b["shard"]} == per
    assert b["total"][0]["count"] == total
    assert "2 shards: actor i writes to shard i % 2" in breakdown_text
    assert "(!" not in breakdown_text

    # watch: one line a refresh, with the totals and each shard's size.
    (line,) = [x for x in watch_text.splitlines() if x.startswith("--- ")]
    assert f"table transitions: {total:,}/5,000 items" in line
    assert f"sizes: replay_0 {before[0][0]:,}/2,500, replay_1 {before[1][0]:,}/2,500" in line

    # offline: the run checkpoint's replay_0/ and replay_1/ give the same numbers.
    off = json.loads(off_stats_json)
    assert [sh["shard"] for sh in off["shards"]] == NAMES
    for s, sh in enumerate(off["shards"]):
        (t,) = sh["tables"]
        assert (t["size"], t["inserts"], t["samples"], t["capacity"]) == before[s]
    assert off["total"][0]["size"] == total
    off_b = json.loads(off_breakdown_json)
    for by in ("shard", "actor", "epsilon_band", "total"):
        assert [(r["group"], r["count"]) for r in off_b[by]] == [
            (r["group"], r["count"]) for r in b[by]
        ]
    assert [(it["key"], it["shard"]) for it in json.loads(off_items_json)] == [
        (it["key"], it["shard"]) for it in items
    ]


@pytest.mark.cli
@pytest.mark.timeout(300)
def test_cli_reads_a_stopped_sharded_run_from_its_checkpoint(sharded, tmp_path):
    # A copy of the run whose shards are gone (nothing listens at their addresses).
    run_dir = tmp_path / "stopped"
    shutil.copytree(os.path.join(sharded["run_dir"], "checkpoints"), run_dir / "checkpoints")
    shutil.copy(os.path.join(sharded["run_dir"], "config.json"), run_dir / "config.json")
    (run_dir / "replay_address").write_text("localhost:1\n")
    (run_dir / "replay_addresses").write_text("replay_0 localhost:1\nreplay_1 localhost:1\n")
    # A checkpoint that lost a shard: what it holds, named, out of the 2 its manifest says.
    partial = tmp_path / "partial"
    shutil.copytree(sharded["ckpt"], partial)
    shutil.rmtree(partial / "replay_0")
    before = [info(sharded, s) for s in range(S)]
    out, items_out, partial_out = run_cli(
        ["stats", f"--run_dir={run_dir}", "--json"],
        ["items", f"--run_dir={run_dir}", "--shard=1", "--n=1000", "--order=top"],
        ["stats", f"--checkpoint={partial}", "--json"],
    )
    items = json.loads(items_out)
    assert len(items) == before[1][0] and {it["shard"] for it in items} == {"replay_1"}
    part = json.loads(partial_out)
    assert part["num_shards"] == S and [sh["shard"] for sh in part["shards"]] == ["replay_1"]
    assert part["total"][0]["size"] == before[1][0]
    stats = json.loads(out)
    assert [sh["shard"] for sh in stats["shards"]] == NAMES
    for s, sh in enumerate(stats["shards"]):
        assert sh["checkpoint"] == str(run_dir / "checkpoints" / "ckpt-000000000" / NAMES[s])
        (t,) = sh["tables"]
        assert (t["size"], t["inserts"], t["samples"], t["capacity"]) == before[s]


def test_replay_content_invariants_hold_per_shard(sharded):
    """Each shard, read back whole from the run checkpoint: it holds exactly the
    items its own actors wrote (no item lost, none on another shard), keys are
    unique across shards, and every stored n-step value is right (CartPole pays
    1 per step: a transition of k steps carries sum_{j<k} gamma^j and a discount
    of gamma^k, or 0 when its episode terminated)."""
    from apex.replay.tables import unpack_item
    from tests.replay_checks import assert_cartpole_nstep
    from tools.replay_inspect import checkpoint_reader as cr

    c = sharded_config()
    gamma, n = c.replay.discount, c.replay.n_step
    keys: set[int] = set()
    for s in range(S):
        items = list(cr.iter_items(os.path.join(sharded["ckpt"], NAMES[s]), TRANSITIONS_TABLE))
        per_actor: dict[int, int] = {}
        for item in items:
            data = unpack_item(item.data)
            actor = int(data["actor"])
            assert shard_of_actor(actor, S) == s, (NAMES[s], actor)
            per_actor[actor] = per_actor.get(actor, 0) + 1
            assert_cartpole_nstep(data, gamma, n)
        # Every item an actor of this shard wrote is here, and nothing else.
        assert per_actor == {
            a: w for a, w in sharded["written"].items() if shard_of_actor(a, S) == s
        }
        shard_keys = {item.key for item in items}
        assert not keys & shard_keys  # item keys are unique over the shards
        keys |= shard_keys
