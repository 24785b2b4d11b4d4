/* A dead letter's page: the fix-payload editor, replay, and live status.
 *
 * Editor: the draft is validated as JSON while typing (the parse error with its line and column), and once
 * it parses, POST .../check/ (stores nothing) answers whether the pipeline's current revision would now pass
 * it and shows the diff against the original. "Save fix" is enabled only when the check of exactly the text
 * in the box has come back and a reason is given; the check's answer is shown BEFORE anything is saved.
 *
 * Replay: one Idempotency-Key per click-session (kept until the server gave a final answer), and the button
 * is disabled while the request is in flight, so a double click is one replay, also across a retried request.
 *
 * Live: a dlq.message update for this dead letter (someone replayed, skipped or deleted it) re-reads the
 * status, history and audit sections. */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const script = document.getElementById("dlq-message-script");
  const id = Number(script.dataset.id);
  const apiBase = script.dataset.api;  // /api/dlq/messages/<id>/
  const SECTIONS = ["message-head", "message-history", "message-audit", "fix-editor", "nav-approvals"];

  // ---------------------------------------------------------------------------------------- editor
  let checkSeq = 0;
  let checkedText = null;   // the draft text the shown check belongs to
  let checkedOk = false;    // that check allows saving (valid, changed)
  let timer = null;

  function el(id) { return document.getElementById(id); }

  /** Line and column (1-based) of a character offset in text. */
  function lineColumn(text, position) {
    const before = text.slice(0, position);
    const line = before.split("\n").length;
    return { line: line, column: position - before.lastIndexOf("\n") };
  }

  /** Parse the draft: {ok, value} or {ok: false, message, line, column}. */
  function parseDraft(text) {
    if (el("fix-mode").value !== "json") return { ok: true, value: text };
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch (e) {
      const m = /line (\d+) column (\d+)/.exec(e.message);
      const p = /position (\d+)/.exec(e.message);
      let where = null;
      if (m) where = { line: Number(m[1]), column: Number(m[2]) };
      else if (p) where = lineColumn(text, Number(p[1]));
      else if (/end of JSON input/.test(e.message)) where = lineColumn(text, text.length);
      const message = e.message.replace(/\s*\(line \d+ column \d+\)/, "").replace(/ in JSON at position \d+/, "").replace(/^JSON\.parse: /, "");
      return { ok: false, message: message, line: where && where.line, column: where && where.column };
    }
  }

  function showValidity(parsed, text) {
    const box = el("fix-validity");
    box.textContent = "";
    if (parsed.ok) {
      box.className = "dsl-status ok";
      box.textContent = el("fix-mode").value === "json" ? "valid JSON" : "sent as text";
      return;
    }
    box.className = "dsl-status bad";
    box.appendChild(document.createTextNode(
      "Invalid JSON" + (parsed.line ? " at line " + parsed.line + ", column " + parsed.column : "") + ": " + parsed.message
    ));
    if (parsed.line) {
      const source = text.split("\n")[parsed.line - 1] || "";
      const pointer = document.createElement("code");
      pointer.className = "dsl-pointer";
      const col = Math.min(parsed.column - 1, source.length);
      pointer.appendChild(document.createTextNode(source.slice(0, col)));
      const mark = document.createElement("mark");
      mark.textContent = source.charAt(col) || " ";
      pointer.appendChild(mark);
      pointer.appendChild(document.createTextNode(source.slice(col + 1)));
      box.appendChild(pointer);
    }
  }

  function renderDiff(diff) {
    const pre = el("fix-diff");
    pre.textContent = "";
    if (!diff) {
      const none = document.createElement("span");
      none.className = "muted";
      none.textContent = "the same as the original";
      pre.appendChild(none);
      return;
    }
    diff.split("\n").forEach(function (line) {
      if (!line) return;
      const span = document.createElement("span");
      span.className = line.startsWith("+++") || line.startsWith("---") ? "diff-file"
        : line.startsWith("@@") ? "diff-hunk" : line.startsWith("+") ? "diff-add" : line.startsWith("-") ? "diff-remove" : "diff-same";
      span.textContent = line + "\n";
      pre.appendChild(span);
    });
  }

  function renderCheck(result) {
    const box = el("fix-check");
    box.textContent = "";
    const check = result.check || {};
    const verdict = document.createElement("p");
    if (!("would_pass" in check)) {
      verdict.className = "muted";
      verdict.textContent = "No pipeline revision to check against (a DLQ written by another tool): replay at your judgement.";
      box.appendChild(verdict);
      return;
    }
    verdict.className = "verdict-line";
    const badge = document.createElement("span");
    badge.className = "verdict " + (check.would_pass ? "ok" : "bad");
    badge.dataset.testid = "verdict";
    badge.textContent = check.would_pass ? "would pass" : "would fail again";
    verdict.appendChild(badge);
    verdict.appendChild(document.createTextNode(" against revision r" + check.revision + " of the pipeline"));
    box.appendChild(verdict);
    const table = document.createElement("table");
    table.className = "check-table";
    table.innerHTML = "<thead><tr><th>destination</th><th>topic</th><th>outcome</th><th>error</th></tr></thead>";
    const body = document.createElement("tbody");
    (check.destinations || []).forEach(function (d) {
      const tr = document.createElement("tr");
      tr.className = "outcome-" + d.outcome;
      [d.destination, d.topic, d.outcome.replace("_", "-"), d.error_type ? d.error_type + ": " + (d.error_message || "") : ""].forEach(function (text) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    box.appendChild(table);
  }

  function updateSave() {
    const save = el("fix-save");
    if (!save) return;
    const text = el("fix-text").value;
    const ready = checkedOk && checkedText === text;
    const reason = el("fix-reason").value.trim();
    save.disabled = !(ready && reason);
    el("fix-hint").textContent = !ready ? (checkedText === text ? "" : "checking…")
      : !reason ? "say why in the reason to save" : "";
  }

  function runCheck() {
    const text = el("fix-text").value;
    const parsed = parseDraft(text);
    showValidity(parsed, text);
    checkedOk = false;
    checkedText = null;
    if (!parsed.ok) { updateSave(); el("fix-hint").textContent = "fix the JSON first"; return; }
    const seq = ++checkSeq;
    updateSave();
    dlq.api("POST", apiBase + "check/", { value: parsed.value }).then(function (answer) {
      if (seq !== checkSeq) return;  // the draft changed since: a newer check is on its way
      checkedText = text;
      if (!answer.ok) {
        el("fix-check").textContent = dlq.errorText(answer);
        updateSave();
        return;
      }
      renderCheck(answer.data);
      renderDiff(answer.data.diff);
      checkedOk = !answer.data.unchanged;
      updateSave();
      if (answer.data.unchanged) el("fix-hint").textContent = "this is the current payload: change it to save a fix";
    });
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = window.setTimeout(runCheck, 350);
    checkedText = null;
    updateSave();
  }

  function save() {
    const text = el("fix-text").value;
    const parsed = parseDraft(text);
    const reason = el("fix-reason").value.trim();
    if (!parsed.ok || !reason) return;
    el("fix-save").disabled = true;
    dlq.api("POST", apiBase + "fix/", { value: parsed.value, reason: reason }).then(function (answer) {
      if (!answer.ok) {
        dlq.flash("The fix was not saved: " + dlq.errorText(answer), "error");
        updateSave();
        return;
      }
      const passes = (answer.data.check || {}).would_pass;
      dlq.flash("Saved as payload revision " + answer.data.payload_revision +
        (passes === undefined ? "." : passes ? "; it would pass now: replay it." : "; it would still fail."), "success");
      el("fix-reason").value = "";
      dlq.refresh(["message-head", "message-history", "message-audit"]);
      runCheck();  // the saved text is now the current payload
    });
  }

  function bindEditor() {
    if (!el("fix-text")) return;
    el("fix-text").addEventListener("input", schedule);
    el("fix-mode").addEventListener("change", runCheck);
    el("fix-reason").addEventListener("input", updateSave);
    el("fix-save").addEventListener("click", save);
    // Tab indents instead of leaving the box: payloads are edited as code.
    el("fix-text").addEventListener("keydown", function (event) {
      if (event.key !== "Tab" || event.shiftKey) return;
      event.preventDefault();
      const t = event.target;
      const start = t.selectionStart;
      t.setRangeText("  ", start, t.selectionEnd, "end");
      schedule();
    });
  }

  bindEditor();
  // A refreshed editor is a new element from the server (e.g. after a failed replay): bind it again.
  document.addEventListener("dlq:refreshed", function (event) {
    if (event.detail.ids.indexOf("fix-editor") >= 0) { checkedText = null; checkedOk = false; bindEditor(); }
  });

  // ---------------------------------------------------------------------------------------- live
  // "Where it failed" (#coordinates) lists the siblings (the same source record's other dead letters) with
  // their statuses: it is re-read when this message or one of them changes (a combined replay, or a sibling
  // replayed, skipped or deleted from its own page), debounced since a combined replay changes several.
  function siblingIds() {
    return Array.from(document.querySelectorAll("[data-testid=siblings] a[href]")).map(function (a) {
      const m = a.getAttribute("href").match(/\/dlq\/messages\/(\d+)\//);
      return m ? Number(m[1]) : null;
    }).filter(function (n) { return n !== null; });
  }
  let siblingsTimer = null;
  function refreshSiblingsSoon() {
    window.clearTimeout(siblingsTimer);
    siblingsTimer = window.setTimeout(function () { dlq.refresh(["coordinates"]); }, 300);
  }
  dlq.connect(function (msg) {
    if (msg.type !== "dlq.message") return;
    if (msg.id === id) { dlq.refresh(SECTIONS); refreshSiblingsSoon(); }
    else if (siblingIds().indexOf(msg.id) >= 0) refreshSiblingsSoon();
  }, function () { dlq.refresh(SECTIONS.concat(["coordinates"])); });
})();
