"""A tour of the cells layer: documents, transactions, conflicts, links and durable storage.

Run it with ``python -m examples.cells_demo`` (``make demo`` runs the notes
demo, ``examples/demo.py``). It keeps its data in ``.cellweave/demo.db`` under
the current directory, so every run finds what the previous ones wrote: the
last step counts how many times the demo has run. Delete that file to start
over.
"""

from __future__ import annotations

import asyncio
import os

from cells import (
    MISSING,
    Cell,
    CommitResult,
    Outcome,
    Space,
    SQLiteStore,
    Transaction,
    edit_with_retry,
)

DATA_DIR = ".cellweave"
DB_PATH = os.path.join(DATA_DIR, "demo.db")


def step(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))


def describe(result: CommitResult) -> str:
    if result.ok:
        return (
            f"{result.outcome!r} (store seq {result.seq})" if result.seq else repr(result.outcome)
        )
    return f"{result.outcome!r}: {type(result.error).__name__}"


def count_of(cell: Cell) -> int:
    """The number in `cell`; a document that does not exist yet reads as MISSING: 0."""
    value = cell.get()
    return 0 if value is MISSING else int(value)


def increment(cell: Cell) -> None:
    """Add one to the number in `cell` (bound to a transaction)."""
    cell.set(count_of(cell) + 1)


def main() -> None:
    os.makedirs(DATA_DIR, exist_ok=True)
    print(f"cellweave cells demo; data in {DB_PATH}")
    store = SQLiteStore(DB_PATH)
    space = Space(store, "demo", session="first")

    step("1. Write a note document and read it back")
    note = space.get_cell({"note": "welcome"})
    print(f"the note's id derives from its cause: {note.id}")
    result = note.set({"title": "Welcome", "body": "Cells are JSON-like documents.", "tags": []})
    print(f"set the note: {describe(result.wait())}")
    print(f"read it back: {note.get()}")
    print(f"one field:    title = {note.key('title').get()!r}")

    step("2. A transaction reads its own writes")
    tx = space.edit()
    draft = note.with_tx(tx)
    draft.key("tags").push("demo")
    draft.key("title").set("Welcome to cellweave")
    print(f"inside the transaction: title = {draft['title'].get()!r}, tags = {draft['tags'].get()}")
    print(f"outside it, not yet:    title = {note['title'].get()!r}, tags = {note['tags'].get()}")
    print(f"commit: {describe(tx.commit().wait())}")
    print(
        f"now everyone sees:      title = {note.key('title').get()!r}, tags = {note['tags'].get()}"
    )

    step("3. Two sessions increment one counter at the same time")
    other = Space(store, "demo", session="second")  # a second replica: a separate session
    mine, theirs = space.get_cell({"counter": "clicks"}), other.get_cell({"counter": "clicks"})
    tx_a, tx_b = space.edit(), other.edit()
    a, b = mine.with_tx(tx_a), theirs.with_tx(tx_b)
    print(f"session A reads {count_of(a)}, session B reads {count_of(b)}")
    increment(a)
    increment(b)
    wrote_a, wrote_b = a.get(), b.get()  # a transaction cannot be read once it has settled
    print(f"session A commits {wrote_a}: {describe(tx_a.commit().wait())}")
    result_b = tx_b.commit().wait()
    print(f"session B commits {wrote_b}: {describe(result_b)}")
    assert result_b.outcome is Outcome.STALE_BASIS, result_b
    print("B's basis was stale: A wrote what B had read. B's write was dropped.")

    def b_increments(tx: Transaction) -> None:
        increment(theirs.with_tx(tx))

    # edit_with_retry re-runs the function in a fresh transaction after a
    # STALE_BASIS (or LIVENESS) rejection; it awaits verdicts, hence asyncio.run.
    retried = asyncio.run(edit_with_retry(other.replica, other.identity, b_increments))
    print(f"B retries with edit_with_retry: {describe(retried)}")
    print(
        f"A sees {count_of(mine)} until its replica takes in B's commit; B sees {count_of(theirs)}"
    )
    # Another session's commits reach a replica through its mailbox; sync()
    # asks the store for the documents' current state and waits for it.
    space.replica.sync([mine.doc_key]).wait()
    print(f"after A syncs with the store, A sees {count_of(mine)} too")

    step("4. A link between documents")
    index = space.get_cell({"index": "notes"})
    index.set({"latest": note}).wait()  # a cell stored as a value becomes a link
    latest = index.key("latest")
    print(f"index['latest'] points at the note: {latest.resolve() == note}")
    print(f"reads follow the link:  index['latest']['title'] = {latest.key('title').get()!r}")
    latest.key("body").set("Written through a link.").wait()
    print(f"writes follow it too:   the note's body is now {note.key('body').get()!r}")
    print(f"index.get() is plain data: {index.get()}")

    step("5. Values persist")
    runs = space.get_cell({"demo": "runs"})

    def count_this_run(tx: Transaction) -> None:
        increment(runs.with_tx(tx))

    # With retries, two demos running at once on one file still count both runs.
    counted = asyncio.run(edit_with_retry(space.replica, space.identity, count_this_run))
    assert counted.ok, counted
    other.replica.close()
    space.replica.close()
    store.close()
    print("closed the store; opening the file again")
    store = SQLiteStore(DB_PATH)
    space = Space(store, "demo")
    print(f"the note, read from disk: {space.get_cell({'note': 'welcome'}).get()}")
    count = count_of(space.get_cell({"demo": "runs"}))
    print(f"this demo has run {count} time{'' if count == 1 else 's'} (on this data file)")
    space.replica.close()
    store.close()


if __name__ == "__main__":
    main()
