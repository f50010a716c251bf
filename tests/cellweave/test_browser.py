"""The web shell in a real browser: Debian's chromium driven by Playwright.

Nothing is downloaded: Playwright launches `/usr/bin/chromium` (`make test`
installs the package when it is missing). Each test waits for what a person
would see (a row, a changed text), never for a fixed time. Screenshots go to
`CELLWEAVE_SCREENSHOTS` when it is set (the docs' pictures are made that way).
"""

from __future__ import annotations

from typing import Any

from browser_support import shot
from playwright.sync_api import Browser, Page, expect
from shell_support import ALICE, BOB, shell


def open_tab(browser: Browser, url: str, token: str) -> Page:
    page = browser.new_page(viewport={"width": 900, "height": 640})
    page.goto(f"{url}/?token={token}")
    expect(page.locator(".cw-record").first).to_be_visible()
    return page


def add_task(page: Page, title: str) -> None:
    stream = page.locator("[data-ptr='/add']")
    stream.locator("input.cw-event").fill(f'{{"title": "{title}", "tags": ["demo"]}}')
    stream.locator("button.cw-send").click()
    expect(page.locator(".cw-table tbody tr", has_text=title)).to_be_visible()


def test_click_a_handler_and_see_the_rows(browser: Browser, tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        add_task(page, "Milk")
        add_task(page, "Bread")
        rows = page.locator(".cw-table tbody tr")
        expect(rows).to_have_count(2)
        # Toggle the second card: only its row changes.
        rows.nth(1).locator("button.cw-send", has_text="toggle").click()
        expect(page.locator("[data-ptr='/cards/1/line']")).to_have_text("[x] Bread #demo")
        expect(page.locator("[data-ptr='/cards/0/line']")).to_have_text("[ ] Milk #demo")
        expect(page.locator("[data-ptr='/done/0']")).to_have_text("Bread")
        shot(page, "shell-board")


def test_edit_a_leaf_and_see_a_conflict(browser: Browser, tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        add_task(page, "Milk")
        title = page.locator("[data-ptr='/cards/0/title']")
        # A second tab edits the title first; this tab's editor still shows "Milk".
        other = open_tab(browser, server.url, ALICE)
        title.dblclick()
        editor = page.locator("input.cw-edit")
        other.locator("[data-ptr='/cards/0/title']").dblclick()
        other.locator("input.cw-edit").fill("Oat milk")
        other.locator("input.cw-edit").press("Enter")
        expect(other.locator("[data-ptr='/cards/0/title']")).to_have_text("Oat milk")
        editor.fill("Soy milk")
        editor.press("Enter")
        expect(page.locator(".cw-status")).to_contain_text("changed")
        expect(page.locator(".cw-status")).to_contain_text("Oat milk")
        expect(page.locator("[data-ptr='/cards/0/title']")).to_have_text("Oat milk")
        shot(page, "shell-conflict")


def test_open_a_row_as_a_page_shared_by_two_tabs_and_close_it(
    browser: Browser, tmp_path: Any
) -> None:
    with shell(tmp_path) as server:
        tab1 = open_tab(browser, server.url, ALICE)
        tab2 = open_tab(browser, server.url, ALICE)
        add_task(tab1, "Milk")
        tab1.locator(".cw-table tbody tr").first.locator("button.cw-open").click()
        expect(tab1.locator(".cw-tab", has_text="Milk")).to_be_visible()
        expect(tab2.locator(".cw-tab", has_text="Milk")).to_be_visible()
        tab2.locator(".cw-tab", has_text="Milk").click()
        expect(tab2.locator("[data-ptr='/line']")).to_have_text("[ ] Milk #demo")
        shot(tab2, "shell-page")
        tab2.locator(".cw-close").click()
        expect(tab1.locator(".cw-tab", has_text="Milk")).to_have_count(0)
        expect(tab2.locator(".cw-tab", has_text="Milk")).to_have_count(0)


def test_two_principals_do_not_see_each_others_pages(browser: Browser, tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        alice = open_tab(browser, server.url, ALICE)
        bob = open_tab(browser, server.url, BOB)
        add_task(alice, "Milk")
        alice.locator(".cw-table tbody tr").first.locator("button.cw-open").click()
        expect(alice.locator(".cw-tab", has_text="Milk")).to_be_visible()
        # Bob shares the space-scoped board (he sees the task) but not alice's page.
        expect(bob.locator(".cw-table tbody tr", has_text="Milk")).to_be_visible()
        expect(bob.locator(".cw-page")).to_have_count(0)


def test_a_bad_token_is_refused(browser: Browser, tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        page = browser.new_page()
        response = page.goto(f"{server.url}/?token=guess")
        assert response is not None
        assert 401 == response.status


def test_values_are_text_never_html(browser: Browser, tmp_path: Any) -> None:
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        add_task(page, "<img src=x onerror=alert(1)>")
        cell = page.locator("[data-ptr='/cards/0/title']")
        expect(cell).to_have_text("<img src=x onerror=alert(1)>")
        assert 0 == page.locator(".cw-content img").count()


def test_the_inspector_shows_the_tree_and_stop_versus_release(
    browser: Browser, tmp_path: Any
) -> None:
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        add_task(page, "Milk")
        page.locator(".cw-table tbody tr").first.locator("button.cw-open").click()
        expect(page.locator(".cw-tab", has_text="Milk")).to_be_visible()
        page.locator(".cw-tab", has_text="inspector").click()
        card = page.locator(".cw-runs tbody tr", has_text="Card").filter(has_text="page")
        expect(card).to_have_count(1)
        card.locator("button.cw-graph").click()
        expect(page.locator(".cw-nodes tbody tr", has_text="card_line")).to_be_visible()
        shot(page, "shell-inspector")
        card.locator("button.cw-release").click()
        expect(page.locator(".cw-status")).to_have_text(
            "release: declined (the run keeps running for you)"
        )
        card.locator("button.cw-stop").click()
        expect(page.locator(".cw-status")).to_have_text("stop: ended")
        expect(page.locator(".cw-tab", has_text="Milk")).to_have_count(0)
        expect(
            page.locator(".cw-runs tbody tr", has_text="Card").filter(has_text="page")
        ).to_have_count(0)


DIGIT_KEYS_JS = """
async () => {
  const { ValueView } = await import("/static/cellweave.js");
  const sent = [];
  const el = document.createElement("div");
  document.body.append(el);
  const actions = { send: (path) => sent.push(path), set() {}, open() {}, error() {} };
  const view = new ValueView(el, actions);
  view.snapshot({ slots: { "1": { n: 0 } }, list: [{ n: 0 }, 7] });
  view.patch([
    { op: "add", path: "/slots/1/go", value: { "$stream": "go" } },
    { op: "replace", path: "/list/1", value: { "$stream": "go" } },
  ]);
  el.querySelector("[data-ptr='/slots/1/go'] button.cw-send").click();
  el.querySelector("[data-ptr='/list/1'] button.cw-send").click();
  el.remove();
  return sent;
}
"""


def test_a_digit_dict_key_in_a_patch_stays_a_key(browser: Browser, tmp_path: Any) -> None:
    # A pointer's "1" is a dict key under a dict and an index under a list: the
    # buttons a patch draws send to the place the value really has.
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        sent = page.evaluate(DIGIT_KEYS_JS)
        assert [["slots", "1", "go"], ["list", 1]] == sent
        page.close()


def test_a_long_table_is_windowed_and_patched_in_and_out_of_its_window(
    browser: Browser, tmp_path: Any
) -> None:
    # 2,000 rows: drawn are the rows in and near the table's scroll box, with
    # spacers for the others; a far row is reached by scrolling, edited, patched.
    with shell(tmp_path, target="linked_rows:long_rows_app") as server:
        page = browser.new_page(viewport={"width": 900, "height": 640})
        page.goto(f"{server.url}/?token={ALICE}")
        box = page.locator(".cw-window")
        # Mapping 2,000 rows takes the server a while on a loaded machine.
        expect(page.locator("[data-ptr='/rows/0/title']")).to_have_text("item 0", timeout=120_000)
        drawn = page.locator(".cw-window tbody tr[data-ptr]").count()
        assert 0 < drawn < 200
        assert 0 == page.locator("[data-ptr='/rows/1500']").count()
        # Scroll the box to row 1500 as a person would, by its scroll position.
        box.evaluate("b => { b.scrollTop = b.scrollHeight * 1500 / 2000; }")
        far = page.locator("[data-ptr='/rows/1500/title']")
        expect(far).to_be_visible()
        expect(far).to_have_text("item 1500")
        assert 0 == page.locator("[data-ptr='/rows/0']").count()
        far.dblclick()
        page.locator("input.cw-edit").fill("far edit")
        page.locator("input.cw-edit").press("Enter")
        expect(page.locator("[data-ptr='/rows/1500/line']")).to_have_text("#1500 far edit")
        expect(far).to_have_text("far edit")
        # Row 10 is out of the window: its patch changes the held value and
        # touches no DOM node (a MutationObserver on the table sees nothing).
        page.evaluate(
            """() => {
              window.mutations = 0;
              new MutationObserver((rs) => { window.mutations += rs.length; })
                .observe(document.querySelector('.cw-window'),
                         {childList: true, subtree: true, characterData: true, attributes: true});
              window.cellweave.ask({op: 'set', cell: 'root', path: ['rows', 10, 'title'],
                                    value: 'patched away', basis: 'item 10'});
            }"""
        )
        page.wait_for_function(
            "() => window.cellweave.view.valueAt(['rows', 10, 'line']) === '#10 patched away'"
        )
        assert 0 == page.evaluate("() => window.mutations")
        assert 0 == page.locator("[data-ptr='/rows/10']").count()
        box.evaluate("b => { b.scrollTop = 0; }")
        expect(page.locator("[data-ptr='/rows/10/title']")).to_have_text("patched away")
        expect(page.locator("[data-ptr='/rows/10/line']")).to_have_text("#10 patched away")
        shot(page, "shell-long-table")
        page.close()


def test_handler_buttons_follow_the_event_schema(browser: Browser, tmp_path: Any) -> None:
    # `bump` takes no payload (event: None): a plain button. `add` takes an
    # `Add` struct: a form prefilled from its schema. `reset` is untyped: the box.
    with shell(tmp_path, target="typed_app:counter_app") as server:
        page = browser.new_page(viewport={"width": 900, "height": 640})
        page.goto(f"{server.url}/?token={ALICE}")
        count = page.locator("[data-ptr='/count']")
        expect(count).to_have_text("0")
        bump = page.locator("[data-ptr='/bump']")
        assert 0 == bump.locator("input").count()
        bump.locator("button.cw-send").click()
        expect(count).to_have_text("1")
        form = page.locator("[data-ptr='/add'] input.cw-event")
        expect(form).to_have_value('{"by":0,"note":"from the form"}')
        form.fill('{"by": 5, "note": "five"}')
        page.locator("[data-ptr='/add'] button.cw-send").click()
        expect(count).to_have_text("6")
        expect(page.locator("[data-ptr='/notes/0']")).to_have_text("five")
        # A payload the schema refuses shows the runtime's error; nothing changes.
        form.fill('{"by": "lots"}')
        page.locator("[data-ptr='/add'] button.cw-send").click()
        expect(page.locator(".cw-status")).to_contain_text("by")
        expect(count).to_have_text("6")
        untyped = page.locator("[data-ptr='/reset'] input.cw-event")
        expect(untyped).to_have_value("")
        untyped.fill('{"to": 2}')
        page.locator("[data-ptr='/reset'] button.cw-send").click()
        expect(count).to_have_text("2")
        shot(page, "shell-typed-handlers")
        page.close()


def test_the_inspector_shows_a_stop_at_once_without_a_poll(
    browser: Browser, tmp_path: Any, monkeypatch: Any
) -> None:
    # The server's own check would come only in an hour: a page closed in one
    # tab leaves the other tab's inspector because the shell pushes it.
    import cellweave._shell

    monkeypatch.setattr(cellweave._shell, "INSPECT_POLL_S", 3600.0)
    with shell(tmp_path) as server:
        tab1 = open_tab(browser, server.url, ALICE)
        tab2 = open_tab(browser, server.url, ALICE)
        add_task(tab1, "Milk")
        tab1.locator(".cw-table tbody tr").first.locator("button.cw-open").click()
        expect(tab1.locator(".cw-tab", has_text="Milk")).to_be_visible()
        tab2.locator(".cw-tab", has_text="inspector").click()
        page_run = tab2.locator(".cw-runs tbody tr", has_text="Card").filter(has_text="page")
        expect(page_run).to_have_count(1)
        tab1.locator(".cw-close").click()
        expect(tab1.locator(".cw-tab", has_text="Milk")).to_have_count(0)
        expect(page_run).to_have_count(0)
        # And a page opened meanwhile shows up the same way.
        tab1.locator(".cw-table tbody tr").first.locator("button.cw-open").click()
        expect(page_run).to_have_count(1)


def test_a_nested_result_has_open_and_opens_as_a_page(browser: Browser, tmp_path: Any) -> None:
    # `summary` is a nested child's result (a link in the parent's result), not
    # a list row: its field offers "open"; a plain record field would not.
    with shell(tmp_path, target="typed_app:child_app") as server:
        page = browser.new_page(viewport={"width": 900, "height": 640})
        page.goto(f"{server.url}/?token={ALICE}")
        expect(page.locator("[data-ptr='/summary/double']")).to_have_text("2")
        opens = page.locator(".cw-record dt button.cw-open")
        expect(opens).to_have_count(1)
        page.locator(".cw-record dt", has_text="summary").locator("button.cw-open").click()
        tab = page.locator(".cw-tab", has_text="Summary")
        expect(tab).to_be_visible()
        tab.click()
        expect(page.locator("[data-ptr='/double']")).to_have_text("2")
        # The page is live: a bump in the root shows in it.
        page.locator(".cw-tab", has_text="root").click()
        page.locator("[data-ptr='/bump'] button.cw-send").click()
        expect(page.locator("[data-ptr='/count']")).to_have_text("2")
        tab.click()
        expect(page.locator("[data-ptr='/double']")).to_have_text("4")
        shot(page, "shell-nested-open")
        page.close()


WINDOW_SHIFT_JS = """
async () => {
  const { ValueView } = await import("/static/cellweave.js");
  const el = document.createElement("div");
  document.body.append(el);
  const view = new ValueView(el, { send() {}, set() {}, open() {}, error() {} });
  const rows = Array.from({ length: 1000 }, (_, i) => ({ n: i }));
  view.snapshot({ rows });
  const drawn = () => [...el.querySelectorAll("tbody tr[data-ptr]")].map((tr) => tr.textContent);
  const before = drawn();
  // An insert at the top and a removal far below the window: the drawn rows shift.
  view.patch([
    { op: "add", path: "/rows/0", value: { n: -1 } },
    { op: "remove", path: "/rows/900" },
  ]);
  const after = drawn();
  // A list that shrinks under the threshold is drawn whole, not windowed.
  view.patch([{ op: "replace", path: "/rows", value: rows.slice(0, 5) }]);
  const small = [el.querySelectorAll(".cw-window").length, drawn().length];
  el.remove();
  const count = [before.length, after.length];
  return { before: before.slice(0, 2), after: after.slice(0, 2), count, small };
}
"""


def test_a_windowed_table_shifts_on_insert_and_unwindows_when_short(
    browser: Browser, tmp_path: Any
) -> None:
    with shell(tmp_path) as server:
        page = open_tab(browser, server.url, ALICE)
        got = page.evaluate(WINDOW_SHIFT_JS)
        assert ["0open", "1open"] == got["before"]
        assert ["-1open", "0open"] == got["after"]
        assert got["count"][0] == got["count"][1] and got["count"][0] < 200
        assert [0, 5] == got["small"]
        page.close()
