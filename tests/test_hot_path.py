"""An actor's env step reaches its Reverb item through at most 8 of apex's files,
and never goes back into the agents once it entered replay (issue 26's hot path).
The observable is the list of files whose functions run (bench/hot_path.py), a
count, not a timing."""

from __future__ import annotations

import pytest

from bench.hot_path import files_of_a_step


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["apex_dqn", "r2d2"])
def test_an_env_step_crosses_at_most_8_files_and_never_goes_back_up(agent):
    files = files_of_a_step(agent, steps=50)
    assert files[0].startswith(f"apex/agents/{'dqn' if agent == 'apex_dqn' else 'r2d2'}/")
    assert "apex/replay/writer.py" in files, files  # the step reached its Reverb item
    assert len(files) <= 8, files
    first_replay = min(i for i, f in enumerate(files) if f.startswith("apex/replay/"))
    assert not [f for f in files[first_replay:] if f.startswith("apex/agents/")], files
