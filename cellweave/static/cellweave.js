// cellweave views: one plain ES module, no build step.
//
// `ValueView` renders a value as a navigable tree (a list whose elements are
// objects sharing keys as a table) and keeps it live from RFC 6902 patches,
// updating only the DOM under the changed paths. `connectShell` runs the web
// shell: a websocket to the server, tabs for the root and the viewer's pages.
// Values are always written as text nodes, never as HTML.

import { applyPatch } from "./vendor/fast-json-patch/core.mjs";

const STREAM = "$stream";
// A table with more rows than this is drawn windowed: only the rows in and
// near its scroll box's viewport are in the DOM, with spacer rows standing
// for the others (a browser lays out 10,000 rows in hundreds of ms per frame).
export const WINDOW_ABOVE = 300;
const OVERSCAN = 20; // rows drawn beyond each edge of the viewport
const ROW_GUESS = 26; // px per row until one is measured

function ptr(path) {
  return path.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
}

function unptr(pointer) {
  if (pointer === "") return [];
  return pointer.slice(1).split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) el.setAttribute(k, v);
  }
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function isStream(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 && STREAM in v;
}

function isRecord(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !isStream(v);
}

function tableColumns(list) {
  // A list is shown as a table when every element is an object with the same keys.
  if (list.length === 0 || !list.every(isRecord)) return null;
  const cols = Object.keys(list[0]);
  if (cols.length === 0) return null;
  const same = (o) => {
    const keys = Object.keys(o);
    return keys.length === cols.length && keys.every((k, i) => k === cols[i]);
  };
  return list.every(same) ? cols : null;
}

function resolveRef(schema, root) {
  // msgspec names structs in $defs and points at them with $ref.
  if (schema && typeof schema.$ref === "string" && schema.$ref.startsWith("#/$defs/")) {
    return (root.$defs || {})[schema.$ref.slice("#/$defs/".length)] || {};
  }
  return schema || {};
}

function eventShape(schema) {
  // What a handler's event schema asks of a person: {none: value} when it
  // takes no payload (null, or an object without fields), else {example}:
  // a value to prefill the form with when the schema is simple (undefined if not).
  const s = resolveRef(schema, schema);
  if (s.type === "null") return { none: null };
  if (s.type === "object" && Object.keys(s.properties || {}).length === 0 && !s.additionalProperties) return { none: {} };
  return { example: exampleOf(s, schema, 0) };
}

function exampleOf(schema, root, depth) {
  const s = resolveRef(schema, root);
  if ("default" in s) return s.default;
  if (depth > 3) return undefined;
  if (Array.isArray(s.enum) && s.enum.length) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type;
  switch (type) {
    case "string": return "";
    case "integer": case "number": return 0;
    case "boolean": return false;
    case "array": return [];
    case "null": return null;
    case "object": {
      const out = {};
      for (const [k, v] of Object.entries(s.properties || {})) {
        const ex = exampleOf(v, root, depth + 1);
        if (ex === undefined) return undefined;
        out[k] = ex;
      }
      return out;
    }
  }
  const options = s.anyOf || s.oneOf;
  if (Array.isArray(options)) {
    const first = options.find((o) => resolveRef(o, root).type !== "null");
    return first === undefined ? null : exampleOf(first, root, depth + 1);
  }
  return undefined;
}

function leafText(v) {
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

function parseInput(text, previous) {
  // What the person typed: JSON where it parses (numbers, true, null, lists),
  // else the text itself when the value was a string.
  try {
    return JSON.parse(text);
  } catch (e) {
    if (typeof previous === "string" || previous === undefined) return text;
    throw new Error(`not valid JSON: ${text}`);
  }
}

export class ValueView {
  // actions: { send(path, event), set(path, value, basis), open(path) }
  constructor(el, actions) {
    this.el = el;
    this.actions = actions;
    this.value = undefined;
    this.nodes = new Map(); // pointer -> element rendering the value at that pointer
    this.windows = new Map(); // pointer of a windowed list -> its Window
    this.windowAbove = WINDOW_ABOVE;
    this.events = new Map(); // "<handler label>|<field>" -> the JSON Schema of its event (null: untyped)
    this.results = new Set(); // pointers of records that are nested results (the server says which)
  }

  snapshot(value) {
    this.value = value;
    this.nodes.clear();
    this.windows.clear();
    this.el.replaceChildren(this.render(value, []));
    this.settle();
  }

  settle() {
    // Windows drawn before they were in the page guessed their size: now
    // that they are, draw as many rows as fill them.
    for (const win of this.windows.values()) if (!win.measured) win.draw(win.start, win.fit(win.start));
  }

  patch(ops) {
    this.value = applyPatch(this.value, ops, false, true).newDocument;
    const dirty = new Set();
    for (const op of ops) {
      for (const p of [op.path, op.from]) {
        if (p === undefined) continue;
        let path = unptr(p);
        // Inserting or removing shifts the siblings: redraw the container.
        if (op.op !== "replace" || p !== op.path) path = path.slice(0, -1);
        dirty.add(ptr(path));
      }
    }
    for (const pointer of this.roots(dirty)) this.redraw(pointer);
  }

  roots(pointers) {
    // Only the outermost of the changed places: redrawing one covers those under it.
    const sorted = [...pointers].sort((a, b) => a.length - b.length);
    const out = [];
    for (const p of sorted) if (!out.some((q) => p === q || p.startsWith(q + "/"))) out.push(p);
    return out;
  }

  redraw(pointer) {
    const win = this.windowOver(pointer);
    if (win !== null) {
      if (win.pointer === pointer) return win.relist();
      // A row outside the window is only held in this.value: it is drawn
      // from there when it scrolls in.
      const index = Number(unptr(pointer.slice(win.pointer.length))[0]);
      if (!win.shows(index)) return;
    }
    let path = unptr(pointer);
    while (path.length > 0 && !this.nodes.has(ptr(path))) path = path.slice(0, -1);
    const at = ptr(path);
    const old = this.nodes.get(at);
    if (old === undefined) return this.snapshot(this.value);
    // A leaf being edited is out of the page: its editor redraws it when it closes.
    if (!old.isConnected) return;
    const value = this.valueAt(path);
    this.forget(old);
    const fresh = this.render(value, this.typed(path), old.tagName);
    old.replaceWith(fresh);
    this.settle();
  }

  typed(path) {
    // A pointer does not say whether "3" is a list index or a dict key: the
    // container the value holds there does (a dict may have digit keys).
    let value = this.value;
    return path.map((p) => {
      const elem = Array.isArray(value) ? Number(p) : p;
      value = value === undefined || value === null ? undefined : value[elem];
      return elem;
    });
  }

  valueAt(path) {
    let value = this.value;
    for (const p of path) value = value === undefined || value === null ? undefined : value[p];
    return value;
  }

  windowOver(pointer) {
    // The windowed list this pointer is in or names (the innermost one), or null.
    let best = null;
    for (const [p, win] of this.windows) {
      if ((pointer === p || pointer.startsWith(p + "/")) && (best === null || p.length > best.pointer.length)) best = win;
    }
    return best;
  }

  reveal(pointer) {
    // Scroll every windowed table on the way so the row holding `pointer` is
    // drawn, and return its element (or null when nothing renders it).
    for (const win of [...this.windows.values()].sort((a, b) => a.pointer.length - b.pointer.length)) {
      if (!pointer.startsWith(win.pointer + "/")) continue;
      win.scrollTo(Number(unptr(pointer.slice(win.pointer.length))[0]));
    }
    const el = this.nodes.get(pointer) || null;
    if (el !== null) el.scrollIntoView({ block: "nearest" });
    return el;
  }

  forget(el) {
    for (const node of [el, ...el.querySelectorAll("[data-ptr]")]) {
      const p = node.getAttribute("data-ptr");
      if (p !== null && this.nodes.get(p) === node) this.nodes.delete(p);
      if (p !== null && this.windows.get(p)?.box === node) this.windows.delete(p);
    }
  }

  track(el, path) {
    const p = ptr(path);
    el.setAttribute("data-ptr", p);
    this.nodes.set(p, el);
    return el;
  }

  render(value, path, asTag) {
    if (asTag === "TR" && isRecord(value)) return this.row(value, path, Object.keys(value));
    if (isStream(value)) return this.track(this.stream(value[STREAM], path), path);
    if (Array.isArray(value)) return this.track(this.list(value, path), path);
    if (value !== null && typeof value === "object") return this.track(this.record(value, path), path);
    return this.track(this.leaf(value, path), path);
  }

  record(obj, path) {
    const dl = h("dl", { class: "cw-record" });
    for (const [k, v] of Object.entries(obj)) {
      const at = [...path, k];
      // A nested result (a link to a child's result) can be opened as a page.
      const open = isRecord(v) && this.results.has(ptr(at)) ? [this.openButton(at)] : [];
      dl.append(h("dt", {}, k, ...open), h("dd", {}, this.render(v, at)));
    }
    return dl;
  }

  list(items, path) {
    const cols = tableColumns(items);
    if (cols === null) {
      const ol = h("ol", { class: "cw-list", start: "0" });
      items.forEach((v, i) => {
        const li = h("li", {}, this.render(v, [...path, i]));
        if (isRecord(v)) li.append(this.openButton([...path, i]));
        ol.append(li);
      });
      return ol;
    }
    const head = h("tr", {}, ...cols.map((c) => h("th", {}, c)), h("th", {}, ""));
    const body = h("tbody");
    const table = h("table", { class: "cw-table" }, h("thead", {}, head), body);
    if (items.length > this.windowAbove) {
      const win = new Window(this, path, cols, table, body);
      this.windows.set(win.pointer, win);
      return win.box;
    }
    items.forEach((v, i) => body.append(this.row(v, [...path, i], cols)));
    return table;
  }

  row(obj, path, cols) {
    const tr = h("tr");
    for (const c of cols) tr.append(h("td", {}, this.render(obj[c], [...path, c])));
    tr.append(h("td", {}, this.openButton(path)));
    return this.track(tr, path);
  }

  openButton(path) {
    return h("button", { class: "cw-open", title: "open as a page", onclick: () => this.actions.open(path) }, "open");
  }

  stream(label, path) {
    const name = path.length ? String(path[path.length - 1]) : label;
    const schema = this.events.get(`${label}|${name}`);
    const shape = schema === undefined || schema === null ? { example: undefined } : eventShape(schema);
    if ("none" in shape) {
      // The handler takes no payload: a plain button.
      const go = () => this.actions.send(path, shape.none);
      return h("span", { class: "cw-stream" }, h("button", { class: "cw-send", title: label, onclick: go }, name));
    }
    const typed = schema !== undefined && schema !== null;
    const input = h("input", { class: "cw-event", placeholder: "event (JSON)", size: typed ? "28" : "14" });
    if (shape.example !== undefined) input.value = JSON.stringify(shape.example);
    if (typed) input.setAttribute("title", `event schema: ${JSON.stringify(schema)}`);
    const send = () => {
      let event = {};
      if (input.value.trim() !== "") {
        try {
          event = JSON.parse(input.value);
        } catch (e) {
          return this.actions.error(`event is not valid JSON: ${input.value}`);
        }
      }
      this.actions.send(path, event);
    };
    return h("span", { class: "cw-stream" }, h("button", { class: "cw-send", title: label, onclick: send }, name), input);
  }

  leaf(v, path) {
    const span = h("span", { class: `cw-leaf cw-${v === null ? "null" : typeof v}`, tabindex: "0" }, leafText(v));
    const edit = () => {
      const input = h("input", { class: "cw-edit", value: leafText(v) });
      const done = (save) => {
        if (save) {
          try {
            this.actions.set(path, parseInput(input.value, v), v);
          } catch (e) {
            this.actions.error(e.message);
          }
        }
        // Show what the value is now, which may have changed while editing.
        input.replaceWith(this.render(this.valueAt(path), path));
      };
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") done(true);
        if (e.key === "Escape") done(false);
      });
      input.addEventListener("blur", () => input.isConnected && done(false));
      span.replaceWith(input);
      input.focus();
      input.select();
    };
    span.addEventListener("dblclick", edit);
    span.addEventListener("keydown", (e) => e.key === "Enter" && edit());
    return span;
  }
}

// A long table drawn windowed: its own scroll box, a spacer row above and one
// below standing for the rows not drawn, and the rows [start, end) between.
class Window {
  constructor(view, path, cols, table, body) {
    this.view = view;
    this.path = path;
    this.pointer = ptr(path);
    this.cols = cols;
    this.body = body;
    this.rowHeight = ROW_GUESS;
    this.measured = false;
    this.start = 0;
    this.end = 0;
    const spacer = () => h("tr", { class: "cw-spacer", "aria-hidden": "true" }, h("td", { colspan: String(cols.length + 1) }));
    this.top = spacer();
    this.bottom = spacer();
    this.box = h("div", { class: "cw-window" }, table);
    this.box.addEventListener("scroll", () => this.follow());
    this.draw(0, this.fit(0));
  }

  items() {
    return this.view.valueAt(this.path) || [];
  }

  shows(index) {
    return index >= this.start && index < this.end;
  }

  fit(first) {
    // How many rows fill the box from `first`, with the overscan on both sides.
    const height = this.box.clientHeight || window.innerHeight || 800;
    return first + Math.ceil(height / this.rowHeight) + OVERSCAN;
  }

  follow() {
    // Redraw only when the viewport comes near an edge of the drawn rows.
    const n = this.items().length;
    const first = Math.floor(this.box.scrollTop / this.rowHeight);
    const last = first + Math.ceil(this.box.clientHeight / this.rowHeight);
    const margin = OVERSCAN / 4;
    const short = (first < this.start + margin && this.start > 0) || (last > this.end - margin && this.end < n);
    if (short) this.draw(Math.max(0, first - OVERSCAN), this.fit(first));
  }

  scrollTo(index) {
    // Scroll the box so row `index` is mid-viewport, and draw the rows there.
    this.box.scrollTop = Math.max(0, index * this.rowHeight - this.box.clientHeight / 2);
    const first = Math.floor(this.box.scrollTop / this.rowHeight);
    if (!this.shows(index) || !this.shows(first)) this.draw(Math.max(0, first - OVERSCAN), Math.max(this.fit(first), index + 1));
  }

  relist() {
    // The list itself changed (an insert or a removal): the window's rows
    // shifted; a list that is no longer a table of the same columns is redrawn whole.
    const items = this.items();
    const cols = Array.isArray(items) ? tableColumns(items) : null;
    if (cols === null || cols.join("\u0000") !== this.cols.join("\u0000") || items.length <= this.view.windowAbove) {
      this.view.windows.delete(this.pointer);
      const fresh = this.view.render(items, this.view.typed(this.path));
      this.view.forget(this.box);
      this.box.replaceWith(fresh);
      this.view.settle();
      return;
    }
    this.draw(this.start, this.end, true);
  }

  draw(start, end, whole = false) {
    // Show rows [start, end). Rows drawn already and still in the window stay
    // as they are (an editor open in one survives a scroll); `whole` redraws
    // them all (the list changed under them).
    const items = this.items();
    end = Math.min(end, items.length);
    start = Math.min(start, end);
    const make = (from, to) => {
      const rows = [];
      for (let i = from; i < to; i++) rows.push(this.view.row(items[i], [...this.path, i], this.cols));
      return rows;
    };
    const overlap = !whole && start < this.end && this.start < end;
    if (overlap) {
      for (let i = this.start; i < this.end; i++) {
        if (i >= start && i < end) continue;
        const tr = this.view.nodes.get(ptr([...this.path, i]));
        if (tr === undefined) continue;
        this.view.forget(tr);
        tr.remove();
      }
      const above = make(start, Math.min(end, this.start));
      const below = make(Math.max(start, this.end), end);
      this.top.after(...above);
      this.bottom.before(...below);
    } else {
      for (const tr of this.body.querySelectorAll(":scope > tr[data-ptr]")) this.view.forget(tr);
      this.body.replaceChildren(this.top, ...make(start, end), this.bottom);
    }
    this.start = start;
    this.end = end;
    this.measure();
    this.top.style.height = `${start * this.rowHeight}px`;
    this.bottom.style.height = `${(items.length - end) * this.rowHeight}px`;
  }

  measure() {
    // Rows are as tall as their contents: take the drawn rows' mean height.
    const first = this.top.nextElementSibling;
    const last = this.bottom.previousElementSibling;
    if (!this.box.isConnected || first === this.bottom || this.end <= this.start) return;
    const height = (last.getBoundingClientRect().bottom - first.getBoundingClientRect().top) / (this.end - this.start);
    if (height > 0) {
      this.rowHeight = height;
      this.measured = true;
    }
  }
}

// ---------------------------------------------------------------- web shell

export function connectShell(el, location) {
  const token = new URLSearchParams(location.search).get("token") || "";
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/ws?token=${encodeURIComponent(token)}`);
  const shell = new Shell(el, (msg) => ws.send(JSON.stringify(msg)));
  // `?window_above=N` windows tables longer than N rows (default WINDOW_ABOVE;
  // `Infinity` never windows, to compare).
  const above = new URLSearchParams(location.search).get("window_above");
  if (above !== null && !Number.isNaN(Number(above))) shell.view.windowAbove = Number(above);
  ws.addEventListener("open", () => shell.start());
  ws.addEventListener("message", (e) => {
    shell.bytesIn += e.data.length;
    shell.receive(JSON.parse(e.data));
  });
  ws.addEventListener("close", (e) => shell.closed(e.code, e.reason));
  window.cellweave = shell; // for people poking at it in the console, and for tests
  return shell;
}

export class Shell {
  constructor(el, send) {
    this.send = send;
    this.bytesIn = 0; // characters received (the websocket counts them; for measurements)
    this.refs = 0;
    this.watchId = 0;
    this.active = "root";
    this.pages = [];
    this.header = h("header", { class: "cw-header" }, h("strong", {}, "cellweave"));
    this.tabs = h("nav", { class: "cw-tabs" });
    this.status = h("div", { class: "cw-status", role: "alert" });
    this.content = h("main", { class: "cw-content" });
    el.replaceChildren(this.header, this.tabs, this.status, this.content);
    this.view = new ValueView(this.content, {
      send: (path, event) => this.ask({ op: "send", cell: this.active, path, event }),
      set: (path, value, basis) => this.ask({ op: "set", cell: this.active, path, value, basis }),
      open: (path) => this.ask({ op: "open", cell: this.active, path }),
      error: (message) => this.error(message),
    });
  }

  start() {
    this.send({ op: "hello" });
  }

  ask(msg) {
    const ref = ++this.refs;
    this.send({ ...msg, ref });
    return ref;
  }

  note(text) {
    this.status.className = "cw-status";
    this.status.textContent = text;
  }

  error(message, value) {
    this.status.className = "cw-status cw-error";
    this.status.textContent = value === undefined ? message : `${message} (now: ${JSON.stringify(value)})`;
  }

  closed(code, reason) {
    this.error(`disconnected (${code}${reason ? ": " + reason : ""})`);
    document.body.setAttribute("data-closed", String(code));
  }

  receive(msg) {
    switch (msg.type) {
      case "hello":
        this.header.append(" ", h("span", { class: "cw-who" }, `${msg.title} · ${msg.principal}`));
        this.hasRoot = msg.root !== null;
        this.show(this.hasRoot ? "root" : "inspector");
        break;
      case "pages":
        this.pages = msg.pages;
        this.drawTabs();
        break;
      case "inspect":
        this.drawInspector(msg.inspect);
        break;
      case "results":
        if (msg.watch !== this.watchId) break;
        if (msg.reset) this.view.results.clear();
        for (const path of msg.drop || []) this.view.results.delete(ptr(path));
        for (const path of msg.paths) this.view.results.add(ptr(path));
        break;
      case "events":
        for (const [at, schema] of Object.entries(msg.events)) this.view.events.set(at, schema);
        break;
      case "snapshot":
        if (msg.watch === this.watchId) this.view.snapshot(msg.value);
        break;
      case "patch":
        if (msg.watch === this.watchId) this.view.patch(msg.ops);
        break;
      case "ok":
        if (msg.inspect) this.drawInspector(msg.inspect);
        else if (msg.run) this.drawGraph(msg.run);
        else if (msg.how) this.note(msg.ended ? `${msg.how}: ended` : `${msg.how}: declined (the run keeps running for you)`);
        else this.note("");
        break;
      case "error":
        this.error(msg.message, msg.value);
        break;
    }
    document.body.setAttribute("data-seen", String(msg.type));
  }

  show(handle) {
    if (this.watchId) this.send({ op: "unwatch", watch: this.watchId });
    if (this.active === "inspector" && handle !== "inspector") this.send({ op: "inspect_unwatch" });
    this.active = handle;
    this.watchId += 1;
    if (handle === "inspector") {
      // The server pushes the inspector's view while it is shown, when it changes.
      this.content.replaceChildren(h("p", {}, "loading…"));
      this.send({ op: "inspect_watch" });
    } else {
      this.send({ op: "watch", watch: this.watchId, cell: handle });
    }
    this.drawTabs();
  }

  drawInspector(data) {
    if (this.active !== "inspector") return;
    const runs = data.registrations;
    const byParent = new Map();
    for (const r of runs) {
      const parent = runs.some((p) => p.key === r.parent) ? r.parent : null;
      if (!byParent.has(parent)) byParent.set(parent, []);
      byParent.get(parent).push(r);
    }
    const body = h("tbody");
    const walk = (parent, depth) => {
      for (const r of byParent.get(parent) || []) {
        const name = h("span", { style: `padding-left:${depth * 16}px` }, r.pattern.split(":").pop());
        const end = (how) => () => this.ask({ op: "end", key: r.key, how });
        body.append(
          h("tr", { "data-key": r.key },
            h("td", {}, name),
            h("td", {}, String(r.generation)),
            h("td", {}, r.launch),
            h("td", { class: "cw-kept" }, r.kept_by.join(", ")),
            h("td", {}, r.principals.join(", ")),
            h("td", {},
              h("button", { class: "cw-graph", onclick: () => this.ask({ op: "inspect_run", key: r.key }) }, "graph"),
              ...(r.mine
                ? [h("button", { class: "cw-stop", onclick: end("stop") }, "stop"),
                   h("button", { class: "cw-release", onclick: end("release") }, "release")]
                : [h("span", { class: "cw-context", title: "launched by another identity" }, "(not yours)")]),
            ),
          ),
        );
        walk(r.key, depth + 1);
      }
    };
    walk(null, 0);
    const head = h("tr", {}, ...["run", "gen", "launched by", "kept alive by", "principals", ""].map((c) => h("th", {}, c)));
    const trace = h("ol", { class: "cw-trace" }, ...data.trace.entries.slice(-20).map((e) => h("li", {}, `${e.event} ${e.key}`)));
    this.inspectorBody = this.inspectorBody || h("div", { class: "cw-graph-view" });
    this.content.replaceChildren(
      h("h3", {}, `Runs of ${data.identity.principal} (${runs.length})`),
      h("table", { class: "cw-table cw-runs" }, h("thead", {}, head), body),
      h("h3", {}, `Pending starts (${data.pending_starts.length})`),
      h("ul", {}, ...data.pending_starts.map((k) => h("li", {}, k))),
      this.inspectorBody,
      h("h3", {}, "Recent lifecycle"),
      trace,
    );
  }

  drawGraph(run) {
    const rows = run.graph.nodes.map((n) =>
      h("tr", {}, h("td", {}, String(n.index)), h("td", {}, n.kind), h("td", {}, n.target),
        h("td", {}, JSON.stringify(n.inputs)), h("td", { class: "cw-runs-count" }, String(n.runs))),
    );
    const head = h("tr", {}, ...["node", "kind", "target", "inputs", "runs"].map((c) => h("th", {}, c)));
    this.inspectorBody = h("div", { class: "cw-graph-view" },
      h("h3", {}, `Graph of ${run.pattern}`),
      h("table", { class: "cw-table cw-nodes" }, h("thead", {}, head), h("tbody", {}, ...rows)),
    );
    this.ask({ op: "inspect" });
  }

  drawTabs() {
    const tab = (handle, title, closable) => {
      const b = h("button", { class: "cw-tab" + (handle === this.active ? " cw-active" : ""), "data-handle": handle, onclick: () => this.show(handle) }, title);
      if (!closable) return b;
      const x = h("button", { class: "cw-close", title: "close (stop) this page", "data-handle": handle, onclick: () => this.closePage(handle) }, "×");
      return h("span", { class: "cw-page" }, b, x);
    };
    const fixed = this.hasRoot === false ? [] : [tab("root", "root", false)];
    this.tabs.replaceChildren(...fixed, ...this.pages.map((p) => tab(p.handle, p.title, true)), tab("inspector", "inspector", false));
    const known = ["root", "inspector", ...this.pages.map((p) => p.handle)];
    if (!known.includes(this.active)) this.show(this.hasRoot === false ? "inspector" : "root");
  }

  closePage(handle) {
    this.ask({ op: "stop", page: handle });
  }
}

// ---------------------------------------------------------------- notebook widget

// anywidget's entry point: the same shell, over the widget's comm.
function render({ model, el }) {
  // Keys typed in the view (Enter in an editor) are the view's, not the
  // notebook's: JupyterLab's shortcuts skip elements marked like this.
  el.setAttribute("data-lm-suppress-shortcuts", "true");
  const shell = new Shell(el, (msg) => model.send(msg));
  model.on("msg:custom", (msg) => shell.receive(msg));
  shell.start();
  return () => {
    shell.send({ op: "unwatch", watch: shell.watchId });
    if (shell.active === "inspector") shell.send({ op: "inspect_unwatch" });
  };
}

export default { render };
