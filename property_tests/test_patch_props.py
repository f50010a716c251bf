"""Change patches: the stream of `sink_patches`, applied to its first value, is `get()`.

The oracle is an RFC 6902 applier written here, independently of the differ
(`cells.patch_ops`): it knows only the RFC's operations and RFC 6901 pointers.

- `patch_ops` law: apply(old, patch_ops(old, new)) == new, for random values and
  for new values built from old ones by sharing, reordering and editing (the
  moves path of the differ).
- The runtime machine: a view cell holds a title and a link to one of two lists
  (one space-scoped, one user-scoped); the lists hold inline values and links to
  element documents. Random element edits, inserts, removes, moves, re-pointed
  links, edits of linked documents and re-scoped lists (the view's link moved to
  the other list), a few per settle; after every settle the patches applied so
  far give exactly `get()`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cells import MISSING, Link, patch_ops, value_equal
from runner import Runtime

# --------------------------------------------------------------------------- the oracle


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    assert pointer == "" or pointer.startswith("/"), pointer
    return [_unescape(t) for t in pointer.split("/")[1:]] if pointer else []


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    assert token.isdigit() and (token == "0" or not token.startswith("0")), token
    i = int(token)
    assert i <= len(container) if adding else i < len(container), (token, len(container))
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for t in tokens[:-1]:
        node = node[_index(node, t, adding=False)] if isinstance(node, list) else node[t]
    return node


def _take(doc: Any, pointer: str) -> tuple[Any, Any]:
    """Remove the value at `pointer`; returns (new document, removed value)."""
    tokens = _split(pointer)
    assert tokens, "cannot remove the whole document"
    parent = _parent(doc, tokens)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, tokens[-1], adding=False))
    assert tokens[-1] in parent, pointer
    return doc, parent.pop(tokens[-1])


def _put(doc: Any, pointer: str, value: Any, *, replace: bool) -> Any:
    tokens = _split(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, list):
        i = _index(parent, tokens[-1], adding=not replace)
        if replace:
            parent[i] = value
        else:
            parent.insert(i, value)
    else:
        assert isinstance(parent, dict), (pointer, parent)
        if replace:
            assert tokens[-1] in parent, pointer
        parent[tokens[-1]] = value
    return doc


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 for add, remove, replace, move (what the stream may contain)."""
    for op in ops:
        kind = op["op"]
        json.dumps(op)  # plain JSON data only
        if kind == "add":
            doc = _put(doc, op["path"], copy.deepcopy(op["value"]), replace=False)
        elif kind == "remove":
            doc, _ = _take(doc, op["path"])
        elif kind == "replace":
            doc = _put(doc, op["path"], copy.deepcopy(op["value"]), replace=True)
        elif kind == "move":
            assert not op["path"].startswith(op["from"] + "/"), op
            doc, moved = _take(doc, op["from"])
            doc = _put(doc, op["path"], moved, replace=False)
        else:
            raise AssertionError(f"unexpected operation {op!r}")
    return doc


# --------------------------------------------------------------------------- the differ law

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "a", "~/", "b/c"])
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.sampled_from(["a", "b", "~", "x/y", "0"]), children, max_size=4),
    ),
    max_leaves=20,
)


@given(values, values)
def test_patch_ops_turn_any_value_into_any_other(old: Any, new: Any) -> None:
    ops = patch_ops(old, new)
    assert value_equal(new, apply_patch(copy.deepcopy(old), ops))
    if value_equal(old, new):
        assert [] == ops


@given(st.lists(values, max_size=8), st.data())
def test_patch_ops_over_shared_elements_move_and_stay_correct(old: list[Any], data: Any) -> None:
    # New lists made of the old list's very objects (reordered, dropped, repeated),
    # fresh values and edited copies: the identity-keyed (move) path of the differ.
    pool = st.one_of(
        st.sampled_from(old) if old else st.nothing(),
        values,
        (st.sampled_from(old) if old else values).map(lambda v: [v, 1]),
    )
    new = data.draw(st.lists(pool, max_size=10))
    ops = patch_ops(old, new)
    assert value_equal(new, apply_patch(copy.deepcopy(old), ops))
    # The same values, none shared (as a materialized list of links reads): aligned
    # by equality instead of identity.
    fresh = copy.deepcopy(new)
    assert value_equal(new, apply_patch(copy.deepcopy(old), patch_ops(old, fresh)))


def test_one_insert_and_an_edit_among_equal_copies_are_two_operations() -> None:
    old = [{"k": i} for i in range(6)]
    new = copy.deepcopy([old[0], {"k": 9}, *old[1:4], {"k": 40}, old[5]])
    assert [
        {"op": "add", "path": "/1", "value": {"k": 9}},
        {"op": "replace", "path": "/5/k", "value": 40},
    ] == patch_ops(old, new)


def test_a_moved_shared_element_is_one_move() -> None:
    a, b, c = {"k": 1}, {"k": 2}, {"k": 3}
    assert [{"op": "move", "from": "/2", "path": "/0"}] == patch_ops([a, b, c], [c, a, b])


# --------------------------------------------------------------------------- the runtime machine

ELEMENTS = 4
small = st.one_of(
    st.integers(0, 9), st.dictionaries(st.sampled_from(["n", "m"]), st.integers(0, 9))
)


class PatchStream(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.rt = Runtime(principal="alice", session="s1")
        rt = self.rt
        self.els = [rt.get_cell({"el": k}) for k in range(ELEMENTS)]
        for k, el in enumerate(self.els):
            el.set({"n": k, "tags": [k]})
        self.lists = [rt.get_cell("list-a"), rt.get_cell("list-b", scope="user")]
        self.lists[0].set([1, self.els[0].link(), {"n": 5}])
        self.lists[1].set([self.els[1].link(), self.els[2].link()])
        self.view = rt.get_cell("view")
        self.view.set({"title": "t", "items": self.lists[0].link()})
        self.current = 0
        self.mirror: Any = MISSING
        self.calls = 0

        def receive(ops: list[dict[str, Any]]) -> None:
            self.calls += 1
            if self.mirror is MISSING:
                assert [{"op": "replace", "path": "", "value": ops[0]["value"]}] == ops
            self.mirror = apply_patch(self.mirror, ops)

        self.cancel = self.view.sink_patches(receive)
        assert 1 == self.calls

    def teardown(self) -> None:
        if hasattr(self, "rt"):
            self.cancel()
            self.rt.close()

    def _raw(self, which: int) -> list[Any]:
        lst = self.lists[which]
        tx = self.rt.edit()
        try:
            value = tx.read(lst.doc_key, ("value",))
        finally:
            tx.abort("peek")
        return list(value) if isinstance(value, list) else []

    @rule(which=st.integers(0, 1), data=st.data())
    def edit_element(self, which: int, data: Any) -> None:
        raw = self._raw(which)
        if not raw:
            return
        i = data.draw(st.integers(0, len(raw) - 1))
        if isinstance(raw[i], dict):
            self.lists[which].key(i, "n").set(data.draw(st.integers(0, 9)))
        else:
            self.lists[which].key(i).set(data.draw(small))

    @rule(which=st.integers(0, 1), data=st.data(), linked=st.booleans())
    def insert(self, which: int, data: Any, linked: bool) -> None:
        raw = self._raw(which)
        i = data.draw(st.integers(0, len(raw)))
        item: Any = (
            self.els[data.draw(st.integers(0, ELEMENTS - 1))].link() if linked else data.draw(small)
        )
        self.lists[which].insert(i, item)

    @rule(which=st.integers(0, 1), data=st.data())
    def remove(self, which: int, data: Any) -> None:
        raw = self._raw(which)
        if raw:
            self.lists[which].remove(data.draw(st.integers(0, len(raw) - 1)))

    @rule(which=st.integers(0, 1), data=st.data())
    def move(self, which: int, data: Any) -> None:
        raw = self._raw(which)
        if len(raw) < 2:
            return
        i = data.draw(st.integers(0, len(raw) - 1))
        j = data.draw(st.integers(0, len(raw) - 1))
        item = raw.pop(i)
        raw.insert(j, item)
        self.lists[which].set(raw)

    @rule(which=st.integers(0, 1), data=st.data())
    def repoint_link(self, which: int, data: Any) -> None:
        raw = self._raw(which)
        links = [i for i, v in enumerate(raw) if isinstance(v, Link)]
        if links:
            i = data.draw(st.sampled_from(links))
            target = self.els[data.draw(st.integers(0, ELEMENTS - 1))]
            self.lists[which].key(i).set(target.link())

    @rule(k=st.integers(0, ELEMENTS - 1), n=st.integers(0, 9), tag=st.booleans())
    def edit_linked_document(self, k: int, n: int, tag: bool) -> None:
        if tag:
            self.els[k].key("tags").push(n)
        else:
            self.els[k].key("n").set(n)

    @rule()
    def rescope_list(self) -> None:
        self.current = 1 - self.current
        self.view.key("items").set(self.lists[self.current].link())

    @rule(title=st.sampled_from(["t", "u", "a/b", "~"]))
    def retitle(self, title: str) -> None:
        self.view.key("title").set(title)

    @rule()
    def settle(self) -> None:
        self.rt.settle()

    @invariant()
    def the_stream_gives_get(self) -> None:
        if not hasattr(self, "rt"):
            return
        self.rt.settle()
        got = self.view.get()
        assert value_equal(None if got is MISSING else got, self.mirror)


TestPatchStream = PatchStream.TestCase
