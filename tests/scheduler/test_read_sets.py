"""The one-document read set answers as the dict it stands for."""

from __future__ import annotations

from cells import DocKey
from scheduler._node import OneRead


def test_a_one_document_read_set_answers_get_as_a_dict_does() -> None:
    key, other = DocKey("s", "a"), DocKey("s", "b")
    entry = ((("value",),), ())
    one = OneRead(key, entry)
    as_dict = {key: entry}
    for probe in (key, other):
        assert one.get(probe) == as_dict.get(probe)
        assert one.get(probe, "absent") == as_dict.get(probe, "absent")
        assert (probe in one) == (probe in as_dict)
    assert dict(one) == as_dict
