import numpy as np
import pytest

from apex.exploration import apex_epsilons, slot_epsilons


def test_ladder_follows_the_apex_formula():
    eps = apex_epsilons(8, base=0.4, alpha=7.0)
    expected = [0.4 ** (1 + 7 * i / 7) for i in range(8)]
    np.testing.assert_allclose(eps, expected)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)


def test_ladder_is_strictly_decreasing_across_all_slots():
    assert np.all(np.diff(apex_epsilons(64)) < 0)


def test_single_slot_gets_the_base_epsilon():
    assert apex_epsilons(1).tolist() == [0.4]


def test_actor_slots_partition_the_global_ladder():
    ladder = apex_epsilons(3 * 4)
    parts = np.concatenate([slot_epsilons(a, 4, 3, 0.4, 7.0) for a in range(3)])
    np.testing.assert_array_equal(parts, ladder)


def test_zero_slots_is_an_error_naming_the_value():
    with pytest.raises(ValueError, match="num_slots=0"):
        apex_epsilons(0)
