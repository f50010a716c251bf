"""Cells basics: a store, a space, cells, transactions and their results.

Run it with ``python -m examples.cells_basics``. The tutorial
(docs/tutorial-cells.md) walks through it part by part.
"""

from __future__ import annotations

from cells import MemoryStore, Notification, Outcome, Space, StoreBase


def main(store: StoreBase | None = None) -> None:
    # A space of a store, seen by one identity. Space() opens its own replica.
    space = Space(store if store is not None else MemoryStore(), "notes")

    # Every visible change is announced here, synchronously.
    def show(n: Notification) -> None:
        for change in n.changes:
            print(f"  [{n.kind}] {change.before!r} -> {change.after!r}")

    space.replica.subscribe(show)

    # A cell's id derives from its cause alone: the same cause, the same cell.
    note = space.get_cell({"note": "groceries"})
    print("new cell reads as", note.get())

    # Outside a transaction, each write commits on its own.
    pending = note.set({"title": "Groceries", "items": []})
    result = pending.wait()  # block until the store's verdict has arrived
    print("set:", result.outcome, "at store seq", result.seq)

    note.key("items").push("milk").wait()
    note.update({"title": "Shopping"}).wait()
    print("title:", note.key("title").get())
    print("items:", note["items"].get())

    # A transaction reads its own writes; nobody else sees them until commit.
    tx = space.edit()
    draft = note.with_tx(tx)
    draft.key("items").push("bread")
    print("inside the transaction:", draft.key("items").get())
    print("outside, before commit:", note.key("items").get())
    result = tx.commit().wait()
    print("commit:", result.ok, result.outcome)
    print("after commit:", note.key("items").get())

    # An aborted transaction settles at once, and nothing it staged remains.
    tx = space.edit()
    note.with_tx(tx).key("title").set("Never mind")
    tx.abort("changed my mind")
    assert tx.result is not None and tx.result.outcome is Outcome.ABORTED
    print("abort:", tx.result.outcome, "title is still", note.key("title").get())


if __name__ == "__main__":
    main()
