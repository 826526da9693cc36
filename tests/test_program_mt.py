"""Integration (test_mt): the whole program in threads; the learner stepped by hand."""

import numpy as np
import pytest
from absl.testing import absltest

pytestmark = pytest.mark.integration


class ProgramTest(absltest.TestCase):
    @pytest.mark.timeout(240)
    def test_learner_stepped_k_times_trains_on_actor_data_and_changes_priorities(self):
        import launchpad as lp

        from apex.config import ApexConfig
        from apex.replay.tables import TRANSITIONS_TABLE
        from launch.program import LearnerNode, find_nodes, make_program

        c = ApexConfig()
        c.actor.num_actors = 2
        c.actor.envs_per_actor = 4
        c.replay.capacity = 10_000
        c.replay.min_size = 100
        c.replay.samples_per_insert = 4.0
        c.replay.error_buffer = 1e7  # the test samples by hand next to the stepped learner
        c.learner.batch_size = 32
        c.learner.hidden_sizes = (16, 16)
        c.evaluation.episodes = 2
        c.logging.progress_period_seconds = 0
        c.stop.max_wall_seconds = 3600
        program = make_program(c, run_dir=self.create_tempdir().full_path)
        (learner_node,) = find_nodes(program, LearnerNode)
        learner_node.disable_run()
        replay_node = [
            n for n in program.get_all_nodes() if isinstance(n, lp.MultiThreadingColocation)
        ][0].nodes[0]
        lp.launch(program, launch_type="test_mt", test_case=self)

        learner = learner_node.create_handle().dereference()
        k = 7
        for _ in range(k):
            learner.step()
        self.assertEqual(learner.get_steps(), k)

        replay = replay_node.create_handle().dereference()
        info = replay.server_info()[TRANSITIONS_TABLE]
        self.assertGreater(info.current_size, 0)

        keys, sampled, new = learner.last_priority_update()
        learner.flush_priorities()
        changed = {
            int(kk): float(p) for kk, p, old in zip(keys, new, sampled) if abs(p - old) > 1e-6
        }
        self.assertNotEmpty(changed)
        seen = {}
        for s in replay.sample(TRANSITIONS_TABLE, num_samples=3000):
            key = int(s[0].info.key)
            if key in changed:
                seen[key] = s[0].info.priority
        self.assertNotEmpty(seen, "no updated key was sampled back")
        for key, prio in seen.items():
            np.testing.assert_allclose(prio, changed[key], rtol=1e-5)
