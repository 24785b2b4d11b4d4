/* A dead letter's key and payload (dlq/_payload.html): the pretty JSON becomes a tree whose objects and arrays
 * fold and unfold, and there are copy buttons.
 *
 * Payloads are untrusted. The tree is built with DOM APIs (createElement, textContent) from the pretty JSON
 * text the server already put in the page (masked for viewers, so masked values stay masked); no payload
 * text ever goes through innerHTML. It is parsed by a small parser of our own rather than JSON.parse, so that
 * numbers are copied as written (JSON.parse would round 12345678901234567890 and turn 1.0 into 1).
 *
 * Every toggle and copy button is a <button>, so the tree works with Tab, Enter and Space. Large payloads
 * start with the levels below the second folded. A node's copy buttons give its JSON and its path
 * (/payload/size: object keys and array indexes, the path syntax of the StreamForge DSL). The toolbar copies
 * the whole payload as the visible tab shows it. Copies go through navigator.clipboard; where that is
 * unavailable (an insecure origin, a refused permission) the status line says so. The status line is
 * aria-live, so a screen reader hears "copied". */
"use strict";

(function () {
  const BIG = 120;          // a payload with more values than this starts folded below FOLD_DEPTH
  const FOLD_DEPTH = 2;
  const nodes = new WeakMap();  // a tree's node element -> {node, path}

  // ------------------------------------------------------------------------------------ parse
  /** Parse JSON text into {type: "object", entries: [{key, rawKey, value}]}, {type: "array", items},
   * or {type: "string" | "number" | "literal", raw}; throws SyntaxError. */
  function parse(text) {
    let i = 0;
    const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

    function fail() { throw new SyntaxError("not JSON at " + i); }
    function space() { while (i < text.length && " \t\n\r".indexOf(text[i]) >= 0) i++; }
    function string() {
      const start = i++;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      if (i >= text.length) fail();
      i++;
      return text.slice(start, i);
    }
    function value() {
      space();
      const c = text[i];
      if (c === "{" || c === "[") {
        const object = c === "{";
        const close = object ? "}" : "]";
        const children = [];
        i++;
        space();
        if (text[i] === close) { i++; return object ? { type: "object", entries: children } : { type: "array", items: children }; }
        for (;;) {
          space();
          if (object) {
            if (text[i] !== '"') fail();
            const rawKey = string();
            space();
            if (text[i++] !== ":") fail();
            children.push({ key: JSON.parse(rawKey), rawKey: rawKey, value: value() });
          } else {
            children.push(value());
          }
          space();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === close) { i++; break; }
          fail();
        }
        return object ? { type: "object", entries: children } : { type: "array", items: children };
      }
      if (c === '"') return { type: "string", raw: string() };
      for (const word of ["true", "false", "null"]) {
        if (text.startsWith(word, i)) { i += word.length; return { type: "literal", raw: word }; }
      }
      NUMBER.lastIndex = i;
      const number = NUMBER.exec(text);
      if (!number || !number[0]) fail();
      i += number[0].length;
      return { type: "number", raw: number[0] };
    }

    const result = value();
    space();
    if (i !== text.length) fail();
    return result;
  }

  function children(node) {
    if (node.type === "object") return node.entries.map(function (e) { return { key: e.key, rawKey: e.rawKey, value: e.value }; });
    if (node.type === "array") return node.items.map(function (v, index) { return { key: String(index), rawKey: null, value: v }; });
    return null;
  }

  /** The node as indented JSON text (two spaces, like the pretty tab), numbers and strings as written. */
  function toJson(node, indent) {
    const kids = children(node);
    if (!kids) return node.raw;
    const open = node.type === "object" ? "{" : "[";
    const close = node.type === "object" ? "}" : "]";
    if (!kids.length) return open + close;
    const inner = indent + "  ";
    return open + "\n" + kids.map(function (k) {
      return inner + (k.rawKey !== null ? k.rawKey + ": " : "") + toJson(k.value, inner);
    }).join(",\n") + "\n" + indent + close;
  }

  function count(node) {
    const kids = children(node);
    return 1 + (kids ? kids.reduce(function (n, k) { return n + count(k.value); }, 0) : 0);
  }

  // ------------------------------------------------------------------------------------ build
  function element(tag, className, text) {
    const el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function button(className, text, label) {
    const b = element("button", className, text);
    b.type = "button";
    b.setAttribute("aria-label", label);
    b.title = label;
    return b;
  }

  function pathOf(segments) {
    return "/" + segments.join("/");
  }

  /** One node: its line (toggle, key, value or opening bracket, copy buttons), and for a non-empty object or
   * array its children and closing line. */
  function build(node, rawKey, segments, depth, last, foldFrom) {
    const path = pathOf(segments);
    const box = element("div", "jt-node");
    box.dataset.path = segments.length ? path : "";
    nodes.set(box, { node: node, path: path, root: !segments.length });
    const line = element("div", "jt-line");
    box.appendChild(line);
    const kids = children(node);
    const name = segments.length ? path : "the whole value";
    if (kids && kids.length) {
      const toggle = button("jt-toggle", "▾", "Fold " + name);
      toggle.setAttribute("aria-expanded", "true");
      line.appendChild(toggle);
    }
    if (rawKey !== null) {
      line.appendChild(element("span", "jt-key", rawKey));
      line.appendChild(document.createTextNode(": "));
    }
    const comma = last ? "" : ",";
    if (!kids) {
      line.appendChild(element("span", "jt-" + node.type, node.raw));
      if (comma) line.appendChild(document.createTextNode(comma));
    } else {
      const open = node.type === "object" ? "{" : "[";
      const close = node.type === "object" ? "}" : "]";
      if (!kids.length) {
        line.appendChild(document.createTextNode(open + close + comma));
      } else {
        line.appendChild(document.createTextNode(open));
        const summary = element("span", "jt-summary", " … " + close + comma + "  " + kids.length +
          (node.type === "object" ? (kids.length === 1 ? " key" : " keys") : (kids.length === 1 ? " item" : " items")));
        summary.hidden = true;
        line.appendChild(summary);
        const list = element("div", "jt-children");
        list.setAttribute("role", "group");
        kids.forEach(function (k, index) {
          list.appendChild(build(k.value, k.rawKey, segments.concat(k.key), depth + 1, index === kids.length - 1, foldFrom));
        });
        box.appendChild(list);
        box.appendChild(element("div", "jt-close", close + comma));
      }
    }
    const actions = element("span", "jt-actions");
    actions.appendChild(button("secondary jt-copy-json", "copy", "Copy the JSON of " + name));
    if (segments.length) actions.appendChild(button("secondary jt-copy-path", "path", "Copy the path " + path));
    line.appendChild(actions);
    if (kids && kids.length && depth >= foldFrom) fold(box, true);
    return box;
  }

  function fold(box, folded) {
    const toggle = box.querySelector(":scope > .jt-line > .jt-toggle");
    if (!toggle) return;
    const name = box.dataset.path || "the whole value";
    toggle.setAttribute("aria-expanded", folded ? "false" : "true");
    toggle.textContent = folded ? "▸" : "▾";
    toggle.setAttribute("aria-label", (folded ? "Unfold " : "Fold ") + name);
    toggle.title = toggle.getAttribute("aria-label");
    box.querySelector(":scope > .jt-line > .jt-summary").hidden = !folded;
    box.querySelector(":scope > .jt-children").hidden = folded;
    box.querySelector(":scope > .jt-close").hidden = folded;
  }

  function foldAll(tree, folded) {
    tree.querySelectorAll(".jt-node").forEach(function (box) {
      // "Collapse all" leaves the top level open: a closed root would show nothing but "{ … }".
      fold(box, folded && box.parentElement !== tree);
    });
  }

  // ------------------------------------------------------------------------------------ copy
  const timers = new WeakMap();

  function say(status, text, bad) {
    status.textContent = text;
    status.classList.toggle("bad", Boolean(bad));
    window.clearTimeout(timers.get(status));
    timers.set(status, window.setTimeout(function () { status.textContent = ""; }, 5000));
  }

  function copy(text, what, status) {
    const refused = "Copying is not available here (no clipboard access): select the text and press Ctrl+C.";
    if (!navigator.clipboard || !window.isSecureContext) { say(status, refused, true); return; }
    navigator.clipboard.writeText(text).then(function () { say(status, "Copied " + what + "."); },
      function () { say(status, refused, true); });
  }

  // ------------------------------------------------------------------------------------ wire up
  function shownPanel(box) {
    return box.querySelector("[data-panel]:not([hidden])");
  }

  function updateTools(box) {
    const panel = shownPanel(box);
    const tab = panel ? panel.dataset.panel : "raw";
    const copyAll = box.querySelector(".payload-copy");
    copyAll.textContent = "Copy " + ({ pretty: "JSON", raw: "raw", hex: "hex" }[tab] || "");
    box.querySelectorAll(".payload-fold").forEach(function (b) { b.hidden = tab !== "pretty" || !box.querySelector(".json-tree"); });
  }

  function setUp(box) {
    if (box.dataset.viewer) return;
    box.dataset.viewer = "on";
    const name = ((box.querySelector("[data-panel]") || {}).dataset || {}).testid || "";
    const prefix = name.replace(/-(pretty|raw|hex)$/, "");
    const tools = element("div", "payload-tools");
    const copyAll = button("secondary payload-copy", "Copy", "Copy the " + prefix + " as the open tab shows it");
    copyAll.dataset.testid = prefix + "-copy";
    tools.appendChild(copyAll);
    [["collapse", "Collapse all", true], ["expand", "Expand all", false]].forEach(function (spec) {
      const b = button("secondary payload-fold", spec[1], spec[1] + " of the " + prefix);
      b.dataset.fold = spec[2] ? "collapse" : "expand";
      b.dataset.testid = prefix + "-" + spec[0] + "-all";
      tools.appendChild(b);
    });
    const status = element("span", "copy-status");
    status.setAttribute("role", "status");
    status.setAttribute("aria-live", "polite");
    status.dataset.testid = prefix + "-copy-status";
    tools.appendChild(status);
    box.querySelector(".tabs").after(tools);

    const pretty = box.querySelector('[data-panel="pretty"]');
    if (pretty) {
      const text = pretty.textContent;
      let root = null;
      try { root = parse(text); } catch (e) { root = null; }  // not JSON after all: the text stays as it is
      if (root) {
        const tree = element("div", "json-tree");
        tree.dataset.testid = prefix + "-tree";
        tree.appendChild(build(root, null, [], 0, true, count(root) > BIG ? FOLD_DEPTH : Infinity));
        pretty.textContent = "";
        pretty.appendChild(tree);
        nodes.set(tree, { text: text });
      }
    }
    updateTools(box);
  }

  function setUpAll() {
    document.querySelectorAll(".payload[data-tabs]").forEach(setUp);
  }

  document.addEventListener("click", function (event) {
    const target = event.target.closest("button");
    const box = target && target.closest(".payload[data-tabs]");
    if (!box) return;
    const status = box.querySelector(".copy-status");
    if (target.classList.contains("jt-toggle")) {
      const node = target.closest(".jt-node");
      fold(node, target.getAttribute("aria-expanded") === "true");
    } else if (target.classList.contains("jt-copy-json")) {
      const info = nodes.get(target.closest(".jt-node"));
      copy(toJson(info.node, ""), info.root ? "the JSON" : "the JSON of " + info.path, status);
    } else if (target.classList.contains("jt-copy-path")) {
      const info = nodes.get(target.closest(".jt-node"));
      copy(info.path, "the path " + info.path, status);
    } else if (target.dataset.fold) {
      const tree = box.querySelector(".json-tree");
      if (tree) foldAll(tree, target.dataset.fold === "collapse");
    } else if (target.classList.contains("payload-copy")) {
      const panel = shownPanel(box);
      if (!panel) return;
      const tree = panel.querySelector(".json-tree");
      copy(tree ? nodes.get(tree).text : panel.textContent, "the " + ({ pretty: "JSON", raw: "raw text", hex: "hex dump" }[panel.dataset.panel] || "payload"), status);
    } else if (target.dataset.tab) {
      updateTools(box);  // dlq.js has switched the panel (its listener was added first)
    }
  });

  setUpAll();
  document.addEventListener("dlq:refreshed", setUpAll);

  window.StreamForgePayload = { parse: parse, toJson: toJson };
})();
