"""Integration (test_mt): the whole program in threads; the learner stepped by hand."""

import numpy as np
import pytest
from absl.testing import absltest

pytestmark = pytest.mark.integration


def _small(agent: str):
    from apex.config import ApexConfig

    c = ApexConfig()
    c.agent = agent
    c.actor.num_actors = 2
    c.actor.envs_per_actor = 4
    # Large enough that nothing the actors insert during the test is evicted (FIFO):
    # the keys whose priorities the learner changed must still be there to sample.
    c.replay.capacity = 1_000_000
    c.replay.min_size = 100 if agent == "apex_dqn" else 20
    c.replay.samples_per_insert = 4.0
    c.replay.error_buffer = 1e7  # the test samples by hand next to the stepped learner
    c.learner.batch_size = 32 if agent == "apex_dqn" else 8
    c.learner.hidden_sizes = (16, 16)
    c.evaluation.episodes = 2
    c.logging.progress_period_seconds = 0
    c.stop.max_wall_seconds = 3600
    if agent == "r2d2":
        c.env.observation_indices = (0, 2)
        c.r2d2.sequence_length, c.r2d2.sequence_period, c.r2d2.burn_in = 10, 5, 5
        c.r2d2.lstm_size = 16
    return c


class ProgramTest(absltest.TestCase):
    def _run(self, agent: str):
        import launchpad as lp

        from apex.agents import item_signature, table_name
        from launch.nodes import LearnerNode
        from launch.program import make_program
        from launch.testing import launch_stepped
        from tests.procs import threads_now, wait_no_threads_left

        c = _small(agent)
        table = table_name(c)
        program = make_program(c, run_dir=self.create_tempdir().full_path)
        replay_node = [
            n for n in program.get_all_nodes() if isinstance(n, lp.MultiThreadingColocation)
        ][0].nodes[0]
        # Registered first, so it runs after every other cleanup: nothing this
        # test started is left.
        self.addCleanup(wait_no_threads_left, threads_now())
        learner = launch_stepped(program, self, LearnerNode)

        k = 7
        for _ in range(k):
            learner.step()
        self.assertEqual(learner.get_steps(), k)

        replay = replay_node.create_handle().dereference()
        info = replay.server_info()[table]
        self.assertGreater(info.current_size, 0)
        # The table holds items of the declared signature (shapes and dtypes).
        from apex.envs import env_spec

        declared = item_signature(c, env_spec(c.env))
        self.assertEqual(
            {k: (tuple(s.shape), s.dtype) for k, s in info.signature.items()},
            {k: (tuple(s.shape), s.dtype) for k, s in declared.items()},
        )

        keys, sampled, new = learner.last_priority_update()
        learner.flush_priorities()
        changed = {
            int(kk): float(p) for kk, p, old in zip(keys, new, sampled) if abs(p - old) > 1e-6
        }
        self.assertNotEmpty(changed)
        seen = {}
        for _ in range(10):  # actors keep inserting: a busy machine may need more draws
            for s in replay.sample(table, num_samples=3000, emit_timesteps=False):
                key = int(s.info.key)
                if key in changed:
                    seen[key] = s.info.priority
            if seen:
                break
        self.assertNotEmpty(seen, "no updated key was sampled back")
        for key, prio in seen.items():
            np.testing.assert_allclose(prio, changed[key], rtol=1e-5)
        return replay, table, c

    @pytest.mark.timeout(240)
    def test_learner_stepped_k_times_trains_on_actor_data_and_changes_priorities(self):
        self._run("apex_dqn")

    @pytest.mark.timeout(240)
    def test_r2d2_learner_stepped_k_times_on_sequences_with_stored_state(self):
        replay, table, c = self._run("r2d2")
        items = [
            s.data
            for s in replay.sample(
                table, num_samples=50, emit_timesteps=False, unpack_as_table_signature=True
            )
        ]
        length = c.r2d2.sequence_length
        for d in items:
            mask = np.asarray(d["mask"])
            n = int(mask.sum())
            self.assertEqual(mask.shape, (length,))
            np.testing.assert_array_equal(mask, [1.0] * n + [0.0] * (length - n))
            self.assertEqual(np.asarray(d["obs"]).shape, (length, 2))
        # Sequences that start mid-episode carry a non-zero stored state.
        mid = [d for d in items if int(d["start_step"]) > 0]
        self.assertNotEmpty(mid, "no sampled sequence starts mid-episode")
        self.assertGreater(max(float(np.abs(d["state_h"]).max()) for d in mid), 0.0)
        self.assertTrue(any(int(d["start_step"]) == 0 for d in items))
