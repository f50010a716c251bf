"""Async lifts and handlers fetching over HTTP: `python -m examples.quotes`.

The example starts its own quote server on 127.0.0.1 (the standard library's
`http.server`, in a thread, on a free port) and runs one pattern against it:

- `lift(fetch_quote)(symbol)`: an async lift. The pass does not wait for the
  fetch; the price lands when the answer comes, and an answer for a symbol
  that changed meanwhile is discarded (the lift fetches again);
- `add(event, watchlist)`: an async handler that fetches a quote and appends
  it to the watchlist. Events on its stream are handled in order; other
  handlers go on meanwhile;
- `watchlist.map(lambda q: ...)`: a plain function as a list op, one line per
  element.

The server answers "ACME" only when the example lets it, so the stale answer
is shown deterministically, without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runner import Runtime, handler, lift, pattern

PRICES = {"ACME": 12.5, "BOLT": 42.0, "CORE": 7.25}
ACME_ASKED = threading.Event()
"""Set by the server when a request for ACME arrived."""
ACME_GO = threading.Event()
"""The server holds its ACME answer until this is set."""
FETCHED: list[str] = []
"""Every fetch the app made, in order."""
BASE = ""


class QuoteServer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        symbol = self.path.rsplit("/", 1)[-1]
        if symbol == "ACME":
            ACME_ASKED.set()
            ACME_GO.wait()
        body = json.dumps({"symbol": symbol, "price": PRICES.get(symbol)}).encode()
        self.send_response(200 if symbol in PRICES else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the example prints what matters


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


async def fetch_quote(symbol: Any) -> Any:
    """The quote of `symbol`, fetched without blocking the loop."""
    if not symbol:
        return None
    FETCHED.append(symbol)
    quote = await asyncio.to_thread(get_json, f"{BASE}/quote/{symbol}")
    return f"{quote['symbol']} {quote['price']}"


@handler
async def add(event, watchlist):  # type: ignore[no-untyped-def]
    quote = await asyncio.to_thread(get_json, f"{BASE}/quote/{event['symbol']}")
    FETCHED.append(event["symbol"])
    watchlist.set([*(watchlist.get() or []), quote])


@pattern
def Quotes(symbol, watchlist):  # type: ignore[no-untyped-def]
    return {
        "price": lift(fetch_quote)(symbol),
        "lines": watchlist.map(lambda q: f"{q['symbol']:>5}  {q['price']:8.2f}"),
        "add": add(watchlist=watchlist),
    }


async def main() -> None:
    global BASE
    server = ThreadingHTTPServer(("127.0.0.1", 0), QuoteServer)
    BASE = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        async with Runtime() as rt:
            symbol = rt.get_cell("symbol")
            watchlist = rt.get_cell("watchlist")
            res = rt.get_cell("quotes")
            tx = rt.edit()
            symbol.with_tx(tx).set("CORE")
            watchlist.with_tx(tx).set([])
            rt.run(tx, Quotes, {"symbol": symbol, "watchlist": watchlist}, res)
            await tx.commit()
            print("1. an async lift fetches the price")
            print(f"  price: {await res.key('price').pull()}")

            print("2. the symbol changes while a fetch is in flight")
            prices: list[Any] = []
            stop = res.key("price").sink(prices.append)
            await symbol.set("ACME")
            rt.settle()  # the lift starts fetching ACME; the server holds the answer
            await asyncio.to_thread(ACME_ASKED.wait)
            await symbol.set("BOLT")  # ... and the user picks another symbol
            ACME_GO.set()  # now ACME's answer arrives: it was computed from "ACME"
            await rt.idle()
            stop()
            print(f"  fetched: {', '.join(FETCHED)}")
            print(f"  price: {res.key('price').get()}")
            landed = "yes" if any(str(p).startswith("ACME") for p in prices) else "no"
            print(f"  did ACME's stale answer ever land? {landed}")

            print("3. an async handler adds quotes, in the order they were sent")
            FETCHED.clear()
            sent = [rt.send(res.key("add"), {"symbol": s}) for s in ("BOLT", "ACME", "CORE")]
            for handle in sent:
                await handle
            print(f"  fetched: {', '.join(FETCHED)}")
            for line in await res.key("lines").pull():
                print(f"  | {line}")
    finally:
        ACME_GO.set()
        server.shutdown()
        server.server_close()
        thread.join()


if __name__ == "__main__":
    asyncio.run(main())
