"""The web shell's protocol against a real server (uvicorn on loopback, real websockets).

The served app is the todo board (`examples.todo:board`). Each test speaks the
wire protocol the browser module speaks; the browser tests drive the same
server through Chromium.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from shell_support import ALICE, BOB, Client, hello, shell, watch
from websockets.exceptions import ConnectionClosed


def add(client: Client, title: str, tags: list[str] | None = None) -> None:
    answer = client.ask(
        {
            "op": "send",
            "cell": "root",
            "path": ["add"],
            "event": {"title": title, "tags": tags or []},
        }
    )
    assert "ok" == answer["type"], answer


def patches_until(client: Client, watch_id: int, value: Any, pred: Any) -> Any:
    """Apply patch messages for `watch_id` to `value` until `pred(value)` holds."""
    while not pred(value):
        msg = client.until(lambda m: m["type"] == "patch" and m["watch"] == watch_id, "a patch")
        value = apply(value, msg["ops"])
    return value


def apply(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """A small RFC 6902 applier (add, remove, replace, move): the test's own oracle."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        if not parts:
            assert op["op"] == "replace"
            doc = op["value"]
            continue
        if op["op"] == "move":
            src = [p.replace("~1", "/").replace("~0", "~") for p in op["from"].split("/")[1:]]
            moved = _take(doc, src)
            _put(doc, parts, moved, insert=True)
            continue
        if op["op"] == "remove":
            _take(doc, parts)
        else:
            _put(doc, parts, op["value"], insert=op["op"] == "add")
    return doc


def _parent(doc: Any, parts: list[str]) -> Any:
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def _take(doc: Any, parts: list[str]) -> Any:
    parent = _parent(doc, parts)
    return parent.pop(int(parts[-1])) if isinstance(parent, list) else parent.pop(parts[-1])


def _put(doc: Any, parts: list[str], value: Any, *, insert: bool) -> None:
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, list):
        i = len(parent) if last == "-" else int(last)
        if insert:
            parent.insert(i, value)
        else:
            parent[i] = value
    else:
        parent[last] = value


def test_index_and_socket_refuse_a_bad_token(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.url}/?token=wrong")
        assert 401 == err.value.code
        err.value.close()
        with urllib.request.urlopen(f"{server.url}/?token={ALICE}") as ok:
            assert 200 == ok.status
        client = server.ws("wrong")
        with pytest.raises(ConnectionClosed) as closed:
            client.next()
        assert 4401 == closed.value.rcvd.code


def test_hello_names_the_principal_and_a_fresh_session(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        a1, a2 = server.ws(ALICE), server.ws(ALICE)
        first, pages = hello(a1)
        second, _ = hello(a2)
        assert ("alice", "alice") == (first["principal"], second["principal"])
        assert first["session"] != second["session"]
        assert [] == pages["pages"]


def test_root_snapshot_shows_handlers_as_streams(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        client = server.ws(ALICE)
        hello(client)
        value = watch(client, 1, "root")
        assert "Todo" == value["name"]
        assert [] == value["cards"]
        # Handlers show as streams, labelled with the handler that receives the events.
        assert value["add"]["$stream"].endswith("examples.todo:add_task")
        assert value["remove"]["$stream"].endswith("examples.todo:remove_task")


def test_an_event_reaches_the_view_as_patches(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        client = server.ws(ALICE)
        hello(client)
        value = watch(client, 1, "root")
        add(client, "Milk", ["shop"])
        value = patches_until(client, 1, value, lambda v: len(v["cards"]) == 1)
        assert "[ ] Milk #shop" == value["cards"][0]["line"]
        # The card's own handler shows as a stream inside the row.
        assert value["cards"][0]["toggle"]["$stream"].endswith(":toggle_done")
        assert ["Milk"] == value["open"]


def test_one_edit_in_a_long_list_patches_only_that_row(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        client = server.ws(ALICE)
        hello(client)
        value = watch(client, 1, "root")
        for title in ("a", "b", "c"):
            add(client, title)
        value = patches_until(client, 1, value, lambda v: len(v["cards"]) == 3)
        client.ask({"op": "send", "cell": "root", "path": ["cards", 1, "toggle"], "event": {}})
        msg = client.until(
            lambda m: (
                m["type"] == "patch" and any(op["path"].startswith("/cards/1/") for op in m["ops"])
            ),
            "the toggled card's patch",
        )
        card_ops = [op for op in msg["ops"] if op["path"].startswith("/cards/")]
        assert all(op["path"].startswith("/cards/1/") for op in card_ops), msg["ops"]


def test_editing_a_leaf_writes_it_and_a_stale_basis_is_refused(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        client = server.ws(ALICE)
        hello(client)
        value = watch(client, 1, "root")
        add(client, "Milk")
        value = patches_until(client, 1, value, lambda v: len(v["cards"]) == 1)
        edit = {"op": "set", "cell": "root", "path": ["cards", 0, "title"]}
        ok = client.ask({**edit, "value": "Oat milk", "basis": "Milk"})
        assert "ok" == ok["type"], ok
        value = patches_until(client, 1, value, lambda v: v["cards"][0]["title"] == "Oat milk")
        # A second view still showing "Milk" tries to save over the newer value.
        stale = client.ask({**edit, "value": "Soy milk", "basis": "Milk"})
        assert "error" == stale["type"]
        assert "changed" in stale["message"]
        assert "Oat milk" == stale["value"]
        assert "Oat milk" == value["cards"][0]["title"]


def test_malformed_and_oversized_messages_get_an_error_and_the_connection_lives(
    tmp_path: Any,
) -> None:
    with shell(tmp_path) as server:
        client = server.ws(ALICE)
        hello(client)
        for raw, expected in [
            ("{not json", "not JSON"),
            ("[1, 2]", "JSON object"),
            (json.dumps({"op": "explode"}), "unknown op"),
            (json.dumps({"op": "watch", "watch": "one", "cell": "root"}), "'watch' must be int"),
            (json.dumps({"op": "send", "cell": "nope", "event": 1}), "unknown cell handle"),
            (json.dumps({"op": "send", "cell": "root", "path": [{}], "event": 1}), "path"),
            (json.dumps({"op": "set", "cell": "root", "value": 1}), "'basis'"),
            ("x" * 70_000, "larger than the limit"),
        ]:
            client.send_raw(raw)
            err = client.until(lambda m: m["type"] == "error", f"an error for {raw[:20]!r}")
            assert expected in err["message"], (raw[:40], err)
        # Still serving this connection, and others.
        assert "Todo" == watch(client, 7, "root")["name"]
        other = server.ws(BOB)
        hello(other)


def test_open_a_row_as_a_page_then_close_it(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        a1, a2 = server.ws(ALICE), server.ws(ALICE)
        hello(a1)
        hello(a2)
        value = watch(a1, 1, "root")
        add(a1, "Milk")
        patches_until(a1, 1, value, lambda v: len(v["cards"]) == 1)
        opened = a1.ask({"op": "open", "cell": "root", "path": ["cards", 0]})
        assert "ok" == opened["type"], opened
        pages = a1.until(lambda m: m["type"] == "pages" and m["pages"], "pages with the card")
        (page,) = pages["pages"]
        assert "Milk" == page["title"]
        # The principal's other tab sees the same page.
        other = a2.until(lambda m: m["type"] == "pages" and m["pages"], "the page in tab 2")
        assert ["Milk"] == [p["title"] for p in other["pages"]]
        card = watch(a1, 2, page["handle"])
        assert "[ ] Milk" == card["line"]
        stopped = a1.ask({"op": "stop", "page": page["handle"]})
        assert "ok" == stopped["type"], stopped
        assert (
            [] == a2.until(lambda m: m["type"] == "pages" and not m["pages"], "no pages")["pages"]
        )


def test_two_principals_never_see_or_end_each_others_pages(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice, bob = server.ws(ALICE), server.ws(BOB)
        hello(alice)
        hello(bob)
        value = watch(alice, 1, "root")
        add(alice, "Milk")
        patches_until(alice, 1, value, lambda v: len(v["cards"]) == 1)
        assert "ok" == alice.ask({"op": "open", "cell": "root", "path": ["cards", 0]})["type"]
        (page,) = alice.until(lambda m: m["type"] == "pages" and m["pages"], "alice's page")[
            "pages"
        ]
        # Bob was never told about it, and naming alice's handle reaches nothing of his.
        refused = bob.ask({"op": "stop", "page": page["handle"]})
        assert "error" == refused["type"]
        assert "unknown page handle" in refused["message"]
        assert all(not m.get("pages") for m in bob.seen if m["type"] == "pages")
        still = alice.ask({"op": "watch", "watch": 2, "cell": page["handle"]})
        assert "ok" == still["type"]


def test_a_handler_that_navigates_opens_a_page_in_that_principals_tabs(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice, bob = server.ws(ALICE), server.ws(BOB)
        hello(alice)
        hello(bob)
        value = watch(alice, 1, "root")
        add(alice, "Milk")
        patches_until(alice, 1, value, lambda v: len(v["cards"]) == 1)
        sent = alice.ask(
            {"op": "send", "cell": "root", "path": ["open_card"], "event": {"title": "Milk"}}
        )
        assert "ok" == sent["type"], sent
        pages = alice.until(lambda m: m["type"] == "pages" and m["pages"], "the navigated page")
        assert ["Milk"] == [p["title"] for p in pages["pages"]]
        assert all(not m.get("pages") for m in bob.seen if m["type"] == "pages")


def inspect_until(client: Client, pred: Any) -> dict[str, Any]:
    """Ask for the inspector's view until `pred` holds of it (each ask is answered)."""
    for _ in range(200):
        view: dict[str, Any] = client.ask({"op": "inspect"})["inspect"]
        if pred(view):
            return view
    raise AssertionError(f"the inspector never showed it; last: {view}")


def test_the_inspector_shows_runs_their_parents_and_what_keeps_them(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice = server.ws(ALICE)
        hello(alice)
        value = watch(alice, 1, "root")
        add(alice, "Milk")
        patches_until(alice, 1, value, lambda v: len(v["cards"]) == 1)
        alice.ask({"op": "open", "cell": "root", "path": ["cards", 0]})
        view = inspect_until(
            alice, lambda v: any("page" in r["kept_by"] for r in v["registrations"])
        )
        runs = {r["pattern"].split(":")[-1]: r for r in view["registrations"]}
        board, card = runs["Board"], runs["Card"]
        assert card["parent"] == board["key"]
        assert "page" in card["kept_by"] and "launch" in card["kept_by"]
        assert ["alice"] == card["principals"]
        graph = alice.ask({"op": "inspect_run", "key": card["key"]})["run"]
        kinds = {n["target"].split(":")[-1]: n for n in graph["graph"]["nodes"]}
        assert 1 <= kinds["card_line"]["runs"]
        assert "handler" == kinds["toggle_done"]["kind"]


def test_the_inspectors_release_declines_a_page_and_stop_ends_it(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice = server.ws(ALICE)
        hello(alice)
        value = watch(alice, 1, "root")
        add(alice, "Milk")
        patches_until(alice, 1, value, lambda v: len(v["cards"]) == 1)
        alice.ask({"op": "open", "cell": "root", "path": ["cards", 0]})
        view = inspect_until(
            alice, lambda v: any("page" in r["kept_by"] for r in v["registrations"])
        )
        (card,) = [r for r in view["registrations"] if "page" in r["kept_by"]]
        # A release is launch-scoped: the page's lifetime keeps the card running.
        released = alice.ask({"op": "end", "key": card["key"], "how": "release"})
        assert {"ended": False, "how": "release"} == {k: released[k] for k in ("ended", "how")}
        stopped = alice.ask({"op": "end", "key": card["key"], "how": "stop"})
        assert stopped["ended"] is True
        after = alice.ask({"op": "inspect"})["inspect"]
        assert card["key"] not in {r["key"] for r in after["registrations"]}
        assert [] == after["pages"]


def test_another_principal_cannot_inspect_or_end_a_run_of_alices(tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice, bob = server.ws(ALICE), server.ws(BOB)
        hello(alice)
        hello(bob)
        value = watch(alice, 1, "root")
        add(alice, "Milk")
        patches_until(alice, 1, value, lambda v: len(v["cards"]) == 1)
        alice.ask({"op": "open", "cell": "root", "path": ["cards", 0]})
        view = inspect_until(
            alice, lambda v: any("page" in r["kept_by"] for r in v["registrations"])
        )
        (card,) = [r for r in view["registrations"] if "page" in r["kept_by"]]
        assert card["key"] not in {
            r["key"] for r in bob.ask({"op": "inspect"})["inspect"]["registrations"]
        }
        for op in (
            {"op": "inspect_run", "key": card["key"]},
            {"op": "end", "key": card["key"], "how": "stop"},
        ):
            refused = bob.ask(op)
            assert "error" == refused["type"], refused
            assert "may see" in refused["message"]
        still = alice.ask({"op": "inspect"})["inspect"]
        assert card["key"] in {r["key"] for r in still["registrations"]}
