/* The bulk page's fix (kind "fix"): "Preview on 5 messages" posts the filter and the fix to
 * /api/dlq/bulk/fix/ with dry_run and shows the count, whether an approver must agree, and each sampled
 * message's diff and would-pass (or why the fix does not apply to it); "Apply fix" is enabled only after
 * a preview, for exactly the filter and fix that were previewed (any change disables it again), and
 * creates the bulk fix with them. While kind "fix" is chosen, the generic Count / Create are hidden. */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const form = document.getElementById("bulk-form");
  const box = form && form.querySelector("[data-kind-note=fix]");
  if (!box) return;
  const kindSelect = form.querySelector("[name=kind]");
  const generic = document.getElementById("bulk-actions");
  const status = document.getElementById("bulk-fix-status");
  const samples = document.getElementById("bulk-fix-samples");
  const apply = document.getElementById("bulk-fix-apply");
  let previewed = null;  // the request body that was previewed

  function say(text, kind) {
    status.textContent = text;
    status.className = "bulk-preview " + (kind || "");
  }

  function showKind() { generic.hidden = kindSelect.value === "fix"; }
  kindSelect.addEventListener("change", showKind);
  showKind();

  function filters() {
    const f = new FormData(form);
    const out = {};
    ["pipeline", "destination", "error_type", "group", "q", "cluster"].forEach(function (name) {
      const v = (f.get(name) || "").trim();
      if (v) out[name] = v;
    });
    const ids = (f.get("ids") || "").trim();
    if (ids) out.ids = ids.split(",").map(Number);
    const hours = { "1h": 1, "24h": 24, "7d": 168 }[f.get("range")];
    if (hours) out.since = new Date(Date.now() - hours * 3600 * 1000).toISOString();
    return out;
  }

  // The fix as the API takes it; a JSON Patch that is not JSON is refused here, with the reason.
  function fix() {
    const f = new FormData(form);
    const text = (f.get("fix") || "").trim();
    if (f.get("fix_kind") === "transform") return { transform: text };
    try { return { patch: JSON.parse(text) }; } catch (e) { throw new Error("the JSON Patch is not JSON: " + e.message); }
  }

  function diffBlock(text) {
    const pre = document.createElement("pre");
    pre.className = "code diff";
    text.split("\n").forEach(function (line) {
      const span = document.createElement("span");
      span.className = line.startsWith("+++") || line.startsWith("---") ? "diff-file" : line.startsWith("@@") ? "diff-hunk" :
        line.startsWith("+") ? "diff-add" : line.startsWith("-") ? "diff-remove" : "";
      span.textContent = line + "\n";
      pre.appendChild(span);
    });
    return pre;
  }

  function sampleCard(s) {
    const card = document.createElement("article");
    card.className = "fix-sample";
    card.dataset.testid = "bulk-fix-sample";
    const head = document.createElement("p");
    const link = document.createElement("a");
    link.href = "/dlq/messages/" + s.dead_letter_id + "/";
    link.textContent = "#" + s.dead_letter_id + " " + s.coordinates;
    head.appendChild(link);
    const verdict = document.createElement("span");
    const check = s.check || {};
    if (s.error) { verdict.textContent = " · left unchanged: " + s.error; verdict.className = "warn"; }
    else if (check.would_pass === undefined) { verdict.textContent = " · no pipeline revision to check against"; verdict.className = "muted"; }
    else if (check.would_pass) { verdict.textContent = " · would pass"; verdict.className = "ok"; }
    else {
      verdict.textContent = " · would fail again: " + (check.destinations || []).filter(function (d) { return d.outcome === "dead_lettered"; })
        .map(function (d) { return d.destination + " (" + d.error_type + ": " + d.error_message + ")"; }).join(", ");
      verdict.className = "bad";
    }
    verdict.dataset.testid = "bulk-fix-verdict";
    head.appendChild(verdict);
    card.appendChild(head);
    if (s.diff) card.appendChild(diffBlock(s.diff));
    return card;
  }

  form.addEventListener("input", function (event) {
    if (event.target.name === "reason" || event.target.name === "rate_limit") return;
    if (previewed) say("The filter or the fix changed: preview again.", "");
    previewed = null;
    apply.disabled = true;
  });

  // Rendered disabled, enabled once this handler is bound (as the count button in dlq_bulk.js).
  const previewButton = document.getElementById("bulk-fix-preview");
  previewButton.disabled = false;
  previewButton.removeAttribute("title");
  previewButton.addEventListener("click", function () {
    let request;
    try { request = { filters: filters(), fix: fix(), dry_run: true }; } catch (e) { say(e.message, "bad"); return; }
    say("previewing…", "");
    samples.replaceChildren();
    dlq.api("POST", box.dataset.url, request).then(function (answer) {
      if (!answer.ok) { say(dlq.errorText(answer), "bad"); return; }
      const p = answer.data;
      if (!p.count) { say("No parked message matches this filter.", ""); return; }
      const failing = p.samples.filter(function (s) { return s.error || (s.check && s.check.would_pass === false); }).length;
      say(p.count.toLocaleString("en-US") + " parked message" + (p.count === 1 ? "" : "s") + " selected · " +
        (p.samples.length - failing) + " of " + p.samples.length + " shown would pass after the fix" +
        (p.held ? " · " + p.held.toLocaleString("en-US") + " held by a pending delete request (left unchanged)" : "") +
        (p.needs_approval ? " · needs an approver (more than " + p.approval_threshold.toLocaleString("en-US") + ")" : " · runs at once, no approval needed"),
        failing ? "warn" : "ok");
      p.samples.forEach(function (s) { samples.appendChild(sampleCard(s)); });
      previewed = request;
      apply.disabled = false;
    });
  });

  apply.addEventListener("click", function () {
    if (!previewed) return;
    const f = new FormData(form);
    const request = Object.assign({}, previewed, {
      dry_run: false, reason: (f.get("reason") || "").trim(), rate_limit: Number(f.get("rate_limit") || 0),
    });
    if (!request.reason) { say("Say why in the reason: it is kept in the audit log.", "bad"); return; }
    apply.disabled = true;
    dlq.api("POST", box.dataset.url, request).then(function (answer) {
      if (!answer.ok) { apply.disabled = false; say(dlq.errorText(answer), "bad"); return; }
      const b = answer.data;
      dlq.flash("Bulk fix #" + b.id + " of " + b.total + " messages " +
        (b.state === "awaiting_approval" ? "waits for an approver." : "is queued."), "success");
      previewed = null;
      say("", "");
      samples.replaceChildren();
      dlq.refresh(["bulk-list", "nav-approvals"]);
    });
  });
})();
