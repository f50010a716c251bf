"""Element identity and the middle diff (`runner._list_keys`)."""

from __future__ import annotations

from cells import Link
from runner._list_keys import diff_middle, keys_and_counts

A, B, C, X = (Link("s", n) for n in "abcx")


def _counts(items: list[Link]) -> dict[Link, int]:
    return keys_and_counts(items)[1]


def test_an_insert_at_the_front_diffs_only_the_new_element() -> None:
    old = [A, B, C]
    assert (0, 3, [], [(X, 0)]) == diff_middle(_counts(old), old, [X, A, B, C])


def test_a_removal_from_the_middle_diffs_only_the_removed_element() -> None:
    old = [A, B, C]
    assert (1, 1, [(B, 0)], []) == diff_middle(_counts(old), old, [A, C])


def test_a_repeated_link_keeps_its_occurrence_numbers_outside_the_middle() -> None:
    old = [A, B, A]
    # The second A stays the suffix's (A, 1); the new middle's B is B's only occurrence.
    assert (1, 1, [(B, 0)], [(C, 0)]) == diff_middle(_counts(old), old, [A, C, A])


def test_a_middle_that_renumbers_a_link_outside_it_walks_the_whole_list() -> None:
    old = [A, B, C]
    # A second A in the middle would be (A, 1) only if the prefix's A is (A, 0), but a
    # changed count of a link that also occurs outside the middle renumbers the rest.
    assert diff_middle(_counts(old), old, [A, A, C]) is None


def test_an_inline_value_in_the_middle_walks_the_whole_list() -> None:
    old = [A, B, C]
    assert diff_middle(_counts(old), old, [A, 7, C]) is None
