"""The Runtime and patterns in a real Jupyter kernel (an event loop is already running there).

Each notebook cell is executed by an ipykernel through nbclient, exactly as a
user's notebook would be: top-level `await` runs on the kernel's own loop, so
nothing may call `asyncio.run`, and `settle()` must finish inside the cell.
"""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

CELLS = [
    # 1. A runtime and a reactive sink: settle() inside the cell, no loop juggling.
    """
from runner import Runtime
from cells import read_value
rt = Runtime()
n = rt.get_cell("n")
n.set(1)
seen = []
cancel = n.sink(seen.append)
n.set(2)
rt.settle()
print("seen", seen)
""",
    # 2. Top-level await on the kernel's running loop: commit verdicts, pull, idle.
    """
tx = rt.edit()
n.with_tx(tx).set(41)
result = await tx.commit()
print("commit", result.ok)
print("pulled", await n.pull())
await rt.idle()
print("idle ok")
""",
    # 3. A scheduler computation across cells, then close the runtime.
    """
double = rt.get_cell("double")
def compute(tx):
    tx.write(double.doc_key, ("value",), read_value(tx, n.link()) * 2)
rt.scheduler.register(compute, identity=rt.identity,
                      outputs=[(double.doc_key, ("value",))],
                      reads=[(n.doc_key, ("value",), False)])
print("double", await double.pull())
n.set(50)
rt.settle()
print("unobserved", double.get())  # nothing reads it now: demand-driven, it did not run
shown = []
stop = double.sink(shown.append)
n.set(60)
rt.settle()
print("observed", shown)
await rt.aclose()
print("closed")
""",
]


def test_runtime_works_inside_a_real_jupyter_kernel() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    client = NotebookClient(nb, kernel_name="python3", timeout=60, allow_errors=False)
    client.execute()
    outputs = [
        "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        for cell in nb.cells
    ]
    assert "seen [1, 2]\n" == outputs[0]
    assert "commit True\npulled 41\nidle ok\n" == outputs[1]
    assert "double 82\nunobserved 82\nobserved [100, 120]\nclosed\n" == outputs[2]


PATTERN_CELLS = [
    # 1. Patterns defined in a notebook cell: found in this process by identity.
    """
from runner import Runtime, pattern, handler, lift

def shout(text):
    return (text or "").upper()

@pattern
def Label(text):
    return {"loud": lift(shout)(text)}

@handler
def add(event, items):
    items.push(event["item"])

@pattern
def Shelf(name, items):
    label = Label(text=name)  # a nested child pattern
    return {
        "label": label,
        "size": lift(lambda xs: len(xs or []))(items),
        "add": add(items=items),
    }

print(Shelf.identity)
""",
    # 2. Run it and start it with top-level await on the kernel's loop.
    """
rt = Runtime()
items, shelf = rt.get_cell("items"), rt.get_cell("shelf")
tx = rt.edit()
items.with_tx(tx).set([])
rt.setup(tx, Shelf, {"name": "books", "items": items}, shelf)
print("commit", (await tx.commit()).ok)
print("started", await rt.start(shelf))
print("pulled", await shelf.pull())
""",
    # 3. Events through the handler, then idle; the nested child stays reactive.
    """
rt.send(shelf.key("add"), {"item": "Dune"})
rt.send(shelf.key("add"), {"item": "Emma"})
await rt.idle()
print("items", items.get())
print("size", await shelf.key("size").pull())
print("runs", sorted(r["pattern"] for r in rt.inspect()["registrations"]))
rt.stop(shelf)
print("after stop", len(rt.registrations()))
await rt.aclose()
""",
]


def test_patterns_defined_in_a_notebook_run_there() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in PATTERN_CELLS]
    client = NotebookClient(nb, kernel_name="python3", timeout=60, allow_errors=False)
    client.execute()
    outputs = [
        "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        for cell in nb.cells
    ]
    assert "__main__:Shelf\n" == outputs[0]
    assert (
        "commit True\nstarted True\npulled {'label': {'loud': 'BOOKS'}, 'size': 0, 'add': None}\n"
    ) == outputs[1]
    assert (
        "items ['Dune', 'Emma']\nsize 2\nruns ['__main__:Label', '__main__:Shelf']\nafter stop 0\n"
    ) == outputs[2]


FLOW_CELLS = [
    # 1. A runtime, a derived value and sinks on both: nothing settles by hand below.
    """
from runner import Runtime, pattern, lift

def double(v):
    return (v or 0) * 2

@pattern
def Doubled(value):
    return {"d": lift(double)(value)}

rt = Runtime()
x, out = rt.get_cell("x"), rt.get_cell("out")
tx = rt.edit()
x.with_tx(tx).set(1)
rt.run(tx, Doubled, {"value": x}, out)
await tx.commit()
on_x, on_d = [], []
x.sink(on_x.append)
out.key("d").sink(on_d.append)
print("first", on_x, on_d)
""",
    # 2. One cell writes (twice: observers see the settled state once) ...
    """
x.set(4)
x.set(5)
""",
    # 3. ... and the next cell reads what the sinks received, with no settle() call.
    """
print("received", on_x, on_d)
""",
]


def test_a_write_in_one_notebook_cell_reaches_sinks_by_the_next_cell() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in FLOW_CELLS]
    client = NotebookClient(nb, kernel_name="python3", timeout=60, allow_errors=False)
    client.execute()
    outputs = [
        "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        for cell in nb.cells
    ]
    assert ["first [1] [2]\n", "", "received [1, 5] [2, 10]\n"] == outputs
