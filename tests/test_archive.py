import numpy as np
import pytest

from moplace.optimize.archive import ParetoArchive
from moplace.optimize.hypervolume import hypervolume, normalized_hypervolume, reference_point


def front_set(archive):
    return {tuple(row) for row in archive.front_values().tolist()}


def brute_force_front(points):
    """Distinct non-dominated rows of ``points``, by pairwise comparison."""
    pts = np.unique(np.asarray(points, dtype=float), axis=0)
    le = (pts[:, None, :] <= pts[None, :, :]).all(axis=2)  # le[i, j]: i weakly dominates j
    lt = (pts[:, None, :] < pts[None, :, :]).any(axis=2)
    dominated = (le & lt).any(axis=0)
    return {tuple(row) for row in pts[~dominated].tolist()}


# --- dominance ---------------------------------------------------------------------------------


def test_two_objective_tradeoff_kept_and_dominated_rejected():
    a = ParetoArchive(2)
    assert a.add([1, 3], 0.0, "a")
    assert a.add([3, 1], 0.0, "b")  # incomparable with (1, 3)
    assert not a.add([2, 4], 0.0, "c")  # dominated by (1, 3)
    assert not a.add([1, 4], 0.0, "d")  # equal in one objective, worse in the other
    assert a.add([2, 2], 0.0, "e")
    assert front_set(a) == {(1, 3), (2, 2), (3, 1)}
    assert [e.payload for e in a.front] == ["a", "e", "b"]  # sorted by first objective
    assert a.n_added == 5 and len(a) == 3


def test_three_objective_dominance():
    a = ParetoArchive(3)
    assert a.add([1, 1, 5], 0.0, None)
    assert a.add([5, 1, 1], 0.0, None)
    assert not a.add([1, 2, 5], 0.0, None)  # worse in one, equal elsewhere
    assert a.add([0, 9, 9], 0.0, None)  # better in the first only: incomparable
    assert not a.add([5, 5, 5], 0.0, None)
    assert a.weakly_dominates([1, 1, 5]) and a.weakly_dominates([6, 6, 6])
    assert not a.weakly_dominates([0.5, 0.5, 0.5])
    assert front_set(a) == {(0, 9, 9), (1, 1, 5), (5, 1, 1)}


def test_better_point_removes_the_ones_it_dominates():
    a = ParetoArchive(3)
    for p in ([2, 2, 2], [1, 3, 2], [3, 1, 2], [0, 5, 5]):
        a.add(p, 0.0, None)
    assert len(a) == 4
    assert a.add([1, 1, 1], 0.0, "best")  # dominates all but (0, 5, 5)
    assert front_set(a) == {(0, 5, 5), (1, 1, 1)}
    assert a.add([0, 0, 0], 0.0, "origin")
    assert [e.payload for e in a.front] == ["origin"]


def test_duplicate_keeps_the_first():
    a = ParetoArchive(2)
    assert a.add([1, 2], 0.0, "first")
    assert not a.add([1, 2], 0.0, "second")
    assert len(a) == 1 and a.n_added == 2
    (entry,) = a.front
    assert entry.payload == "first" and entry.index == 0


def test_entries_are_frozen_and_values_read_only():
    a = ParetoArchive(2)
    src = np.array([1.0, 2.0])
    a.add(src, 0.0, {"s": 1})
    src[0] = 99.0  # the archive holds its own copy
    entry = a.front[0]
    assert entry.values.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError):
        entry.values[0] = 0.0
    with pytest.raises(AttributeError):
        entry.index = 5
    out = a.front_values()
    out[0, 0] = -1.0  # a copy: the archive is unaffected
    assert a.front_values()[0, 0] == 1.0


def test_front_sorted_lexicographically():
    a = ParetoArchive(3)
    for p in ([2, 1, 9], [1, 5, 1], [1, 2, 3], [3, 0, 9]):
        a.add(p, 0.0, None)
    np.testing.assert_array_equal(a.front_values(), [[1, 2, 3], [1, 5, 1], [2, 1, 9], [3, 0, 9]])
    assert [e.values.tolist() for e in a.front] == a.front_values().tolist()


def test_bad_input_rejected():
    a = ParetoArchive(3)
    with pytest.raises(ValueError):
        a.add([1, 2], 0.0, None)
    with pytest.raises(ValueError):
        a.add([1, np.nan, 2], 0.0, None)
    with pytest.raises(ValueError):
        a.add([1, 2, 3], -1.0, None)
    with pytest.raises(ValueError):
        ParetoArchive(0)
    assert a.n_added == 0


# --- infeasible points -------------------------------------------------------------------------


def test_infeasible_kept_apart_least_violating_first():
    a = ParetoArchive(2)
    assert not a.add([0, 0], 5.0, "v5")  # would dominate everything, but does not fit
    assert not a.add([3, 3], 1.0, "v1-x3")
    assert not a.add([2, 9], 1.0, "v1-x2")  # same violation: smaller first objective first
    assert not a.add([1, 1], 3.0, "v3")
    assert a.add([9, 9], 0.0, "feasible")
    assert len(a) == 1 and a.front[0].payload == "feasible"
    assert [e.payload for e in a.infeasible()] == ["v1-x2", "v1-x3", "v3", "v5"]
    assert [e.payload for e in a.infeasible(2)] == ["v1-x2", "v1-x3"]
    assert a.infeasible()[0].violation == 1.0 and a.n_added == 5


def test_infeasible_only_search_still_returns_something():
    a = ParetoArchive(3)
    for i, v in enumerate([4.0, 2.0, 8.0]):
        a.add([i, i, i], v, i)
    assert len(a) == 0 and a.front == [] and a.front_values().shape == (0, 3)
    assert a.hypervolume([1, 1, 1]) == 0.0
    assert [e.payload for e in a.infeasible(1)] == [1]


def test_infeasible_bounded_evicts_most_violating():
    rng = np.random.default_rng(3)
    a = ParetoArchive(3, max_infeasible=100)
    violations = rng.uniform(1, 1000, size=1000)
    for i, v in enumerate(violations):
        a.add(rng.random(3), v, i)
    kept = a.infeasible(k=10_000)
    assert len(kept) == 100
    np.testing.assert_array_equal([e.violation for e in kept], np.sort(violations)[:100])
    assert {e.payload for e in kept} == set(np.argsort(violations)[:100].tolist())


def test_repeated_infeasible_point_stored_once():
    a = ParetoArchive(2, max_infeasible=3)
    for _ in range(5):
        a.add([1, 1], 2.0, "same")
    a.add([1, 1], 3.0, "worse")
    a.add([2, 2], 2.0, "other")
    assert [e.payload for e in a.infeasible()] == ["same", "other", "worse"]
    assert a.infeasible()[0].index == 0


# --- hypervolume -------------------------------------------------------------------------------


def test_hypervolume_2d_by_hand():
    assert hypervolume([[1, 1]], [2, 3]) == pytest.approx(2.0)
    # boxes 3x1 and 2x3 overlapping in a 2x1 box: 3 + 6 - 2
    assert hypervolume([[1, 3], [2, 1]], [4, 4]) == pytest.approx(7.0)


def test_hypervolume_3d_by_hand():
    assert hypervolume([[1, 2, 3]], [2, 4, 6]) == pytest.approx(6.0)
    # boxes 2x2x1 and 1x1x2 overlapping in the unit cube [1, 2]^3: 4 + 2 - 1
    assert hypervolume([[0, 0, 1], [1, 1, 0]], [2, 2, 2]) == pytest.approx(5.0)


def test_points_outside_reference_contribute_nothing():
    ref = [4, 4]
    base = hypervolume([[1, 3], [2, 1]], ref)
    assert hypervolume([[1, 3], [2, 1], [5, 0], [0, 4], [4, 4]], ref) == pytest.approx(base)
    assert hypervolume([[5, 0], [0, 4]], ref) == 0.0
    assert hypervolume(np.empty((0, 2)), ref) == 0.0
    assert hypervolume([], ref) == 0.0


def test_normalized_hypervolume_is_the_dominated_fraction():
    assert normalized_hypervolume([[1, 1]], [2, 2]) == pytest.approx(0.25)
    assert normalized_hypervolume([[0, 0, 0]], [3, 5, 7]) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        ref = rng.uniform(0.5, 2e9, size=3)
        pts = rng.uniform(0, 1.2, size=(30, 3)) * ref
        nhv = normalized_hypervolume(pts, ref)
        assert 0.0 <= nhv <= 1.0
        assert nhv == pytest.approx(hypervolume(pts / ref, np.ones(3)))
    with pytest.raises(ValueError):
        normalized_hypervolume([[1, 1]], [0, 2])


def test_archive_hypervolume_normalized():
    a = ParetoArchive(2)
    for p in ([1, 3], [2, 1], [3, 3]):
        a.add(p, 0.0, None)
    assert a.hypervolume([4, 4]) == pytest.approx(7.0 / 16.0)


def test_reference_point_rule():
    # rows: baselines (single, data-parallel, ...); columns: runtime, communication, memory
    values = np.array([[2.0, 0.0, 10.0], [1.0, 0.0, 20.0], [4.0, 0.0, 5.0]])
    np.testing.assert_allclose(reference_point(values), [4.4, 1.0, 22.0])
    np.testing.assert_allclose(reference_point(values, margin=0.0), [4.0, 1.0, 20.0])
    # with the zero column at 1.0, zero-communication points span that axis fully
    ref = reference_point(values)
    assert normalized_hypervolume([[0.0, 0.0, 0.0]], ref) == pytest.approx(1.0)
    assert normalized_hypervolume([[0.0, 5.0, 0.0]], ref) == 0.0  # moves bytes: outside
    with pytest.raises(ValueError):
        reference_point([[1.0, -1.0]])
    with pytest.raises(ValueError):
        reference_point(np.empty((0, 3)))


# --- property: the archive is the non-dominated set of its feasible stream ----------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [2, 3])
def test_front_matches_brute_force_in_any_order(seed, m):
    rng = np.random.default_rng(seed)
    n = 400
    # small integers give many ties and exact duplicates; reals give generic fronts
    pts = rng.integers(0, 8, size=(n, m)).astype(float) if seed % 2 else rng.random((n, m))
    violation = np.where(rng.random(n) < 0.3, rng.uniform(0.1, 10, n), 0.0)
    feasible = pts[violation == 0]

    a = ParetoArchive(m)
    entered = [a.add(p, v, i) for i, (p, v) in enumerate(zip(pts, violation))]
    expected = brute_force_front(feasible)
    assert front_set(a) == expected
    assert len(a) == len(expected) and a.n_added == n
    assert not any(e for e, v in zip(entered, violation) if v > 0)
    # each front entry is the first feasible occurrence of its values
    for e in a.front:
        same = np.flatnonzero((pts == e.values).all(axis=1) & (violation == 0))
        assert e.index == e.payload == same[0]
    # every feasible point seen is weakly dominated by the final front
    assert all(a.weakly_dominates(p) for p in feasible)

    for perm_seed in range(3):
        order = np.random.default_rng(100 + perm_seed).permutation(n)
        b = ParetoArchive(m)
        for i in order:
            b.add(pts[i], violation[i], int(i))
        assert front_set(b) == expected
        assert b.hypervolume(np.full(m, 10.0)) == pytest.approx(a.hypervolume(np.full(m, 10.0)))
