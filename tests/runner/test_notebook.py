"""The Runtime inside a real Jupyter kernel (an event loop is already running there).

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
