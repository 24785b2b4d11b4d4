/* The bulk page. The form: "Count (dry run)" posts the filter with dry_run and shows how many parked
 * messages it selects and whether an approver must agree; "Create" is enabled only after a count, for
 * exactly the filter that was counted (any change to the form disables it again), and creates with that
 * same filter. The list: dlq.bulk updates move the progress bars; a state change re-reads the list (its
 * buttons depend on the state). While the websocket is down, active actions are polled instead. */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const live = window.StreamForgeLive;
  const POLL_MS = 3000;
  const form = document.getElementById("bulk-form");

  // ---------------------------------------------------------------------------------------- form
  if (form) {
    const preview = document.getElementById("bulk-preview");
    const create = document.getElementById("bulk-create");
    let counted = null;  // the request body that was counted

    function utc(value) { return value ? value + (value.length === 16 ? ":00Z" : "Z") : ""; }

    function body() {
      const f = new FormData(form);
      const filters = {};
      ["pipeline", "destination", "error_type", "group", "q", "cluster"].forEach(function (name) {
        const v = (f.get(name) || "").trim();
        if (v) filters[name] = v;
      });
      const ids = (f.get("ids") || "").trim();  // a selection ticked on the list page
      if (ids) filters.ids = ids.split(",").map(Number);
      const scan = (f.get("fix_forward") || "").trim();  // the candidates of a fix-forward scan
      if (scan) filters.fix_forward = Number(scan);
      const range = f.get("range");
      const hours = { "1h": 1, "24h": 24, "7d": 168 }[range];
      if (hours) filters.since = new Date(Date.now() - hours * 3600 * 1000).toISOString();
      else if (f.get("since")) filters.since = utc(f.get("since"));
      if (f.get("until")) filters.until = utc(f.get("until"));
      return {
        kind: f.get("kind"),
        filters: filters,
        rate_limit: Number(f.get("rate_limit") || 0),
        reason: (f.get("reason") || "").trim(),
      };
    }

    // A replay's dry run: "N of M would fail again at X (reason)", and the ways around it (each a new
    // selection on this page, counted again before anything runs): skip those, or replay only the others.
    const wouldFail = document.getElementById("bulk-would-fail");
    function showWouldFail(p) {
      wouldFail.replaceChildren();
      wouldFail.hidden = !p.would_fail;
      if (!p.would_fail) return;
      const head = document.createElement("p");
      head.dataset.testid = "would-fail-summary";
      head.textContent = p.would_fail.toLocaleString("en-US") + " of " + p.checked.toLocaleString("en-US") +
        (p.checked < p.count ? " checked (of " + p.count.toLocaleString("en-US") + " selected)" : "") +
        " would fail again at " + p.failing.map(function (f) {
          return f.destination + " (" + f.error_type + ": " + f.error_message + (p.failing.length > 1 ? ", " + f.count + "×" : "") + ")";
        }).join("; ") + ".";
      wouldFail.appendChild(head);
      const links = document.createElement("p");
      function offer(text, kind, ids, testid) {
        const a = document.createElement("a");
        a.className = "button secondary";
        a.dataset.testid = testid;
        a.href = wouldFail.dataset.page + "?kind=" + kind + "&ids=" + ids.join(",");
        a.textContent = text;
        links.appendChild(a);
        links.appendChild(document.createTextNode(" "));
      }
      if (p.passing_ids.length) offer("Leave them out: replay the other " + p.passing_ids.length.toLocaleString("en-US"), "replay", p.passing_ids, "exclude-failing");
      if (p.failing_ids.length === p.would_fail) offer("Skip the " + p.would_fail.toLocaleString("en-US") + " that would fail…", "skip", p.failing_ids, "skip-failing");
      wouldFail.appendChild(links);
    }

    function say(text, kind) {
      preview.textContent = text;
      preview.className = "bulk-preview " + (kind || "");
    }

    // The kind's own warning (a delete erases, always needs an approver, and Kafka keeps its copy).
    const kindSelect = form.querySelector("[name=kind]");
    function showKindNote() {
      form.querySelectorAll("[data-kind-note]").forEach(function (note) { note.hidden = note.dataset.kindNote !== kindSelect.value; });
    }
    kindSelect.addEventListener("change", showKindNote);
    showKindNote();

    form.addEventListener("input", function (event) {
      if (event.target.name === "reason") return;  // the reason does not change what is selected
      if (counted) say("The filter changed: count again.", "");
      counted = null;
      wouldFail.hidden = true;
      create.disabled = true;
    });

    // Rendered disabled, enabled once this handler is bound: a click before the script ran did nothing.
    const countButton = document.getElementById("bulk-count");
    countButton.disabled = false;
    countButton.removeAttribute("title");
    countButton.addEventListener("click", function () {
      if (kindSelect.value === "fix") return;  // a bulk fix has its own preview (dlq_bulk_fix.js)
      const request = Object.assign(body(), { dry_run: true });
      say("counting…", "");
      dlq.api("POST", form.dataset.url, request).then(function (answer) {
        if (!answer.ok) { say(dlq.errorText(answer), "bad"); return; }
        const p = answer.data;
        if (!p.count) { say("No parked message matches this filter.", ""); return; }
        counted = request;
        create.disabled = false;
        say(p.count.toLocaleString("en-US") + " parked message" + (p.count === 1 ? "" : "s") + " match" +
          (p.held ? " · " + p.held.toLocaleString("en-US") + " held by a pending delete request (left out: an approver decides them first)" : "") +
          (p.needs_approval ? " · needs an approver (more than " + p.approval_threshold.toLocaleString("en-US") + ", counting your other bulk selections within the approval window)" : " · runs at once, no approval needed"),
          p.needs_approval ? "warn" : "ok");
        preview.dataset.count = String(p.count);
        preview.dataset.needsApproval = String(p.needs_approval);
        preview.dataset.held = String(p.held || 0);
        showWouldFail(p);
      });
    });

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!counted || kindSelect.value === "fix") return;
      const request = Object.assign({}, counted, { reason: body().reason, kind: body().kind, dry_run: false });
      if (!request.reason) { say("Say why in the reason: it is kept in the audit log.", "bad"); return; }
      create.disabled = true;
      dlq.api("POST", form.dataset.url, request).then(function (answer) {
        if (!answer.ok) { create.disabled = false; say(dlq.errorText(answer), "bad"); return; }
        const b = answer.data;
        dlq.flash("Bulk " + b.kind + " #" + b.id + " of " + b.total + " messages " +
          (b.state === "awaiting_approval" ? "waits for an approver." : "is queued."), "success");
        counted = null;
        say("", "");
        dlq.refresh(["bulk-list", "nav-approvals"]);
      });
    });
  }

  // ---------------------------------------------------------------------------------------- progress
  function showProgress(update) {
    const row = document.querySelector('#bulk-list tr[data-bulk="' + update.id + '"]');
    if (!row) { dlq.refresh(["bulk-list"]); return; }  // created elsewhere
    const bar = row.querySelector('[data-field="bar"]');
    bar.max = update.total || 1;
    bar.value = update.total ? update.processed : 1;
    bar.title = update.processed + " of " + update.total;
    row.querySelector('[data-field="counts"]').textContent = update.processed + " / " + update.total + " · " +
      update.succeeded + " ok · " + update.failed + " failed";
    if (row.dataset.state !== update.state) dlq.refresh(["bulk-list"]);
  }

  function poll() {
    if (live.isLive()) return;
    const list = document.getElementById("bulk-list");
    const ids = (list.dataset.liveIds || "").split(",").filter(Boolean);
    ids.forEach(function (id) {
      dlq.api("GET", list.dataset.api + id + "/").then(function (answer) {
        if (answer.ok) showProgress(Object.assign({ id: answer.data.id, state: answer.data.state }, answer.data.progress));
      });
    });
  }

  // The selected dead letters (a selection from the list page) keep their statuses live: re-read from the
  // page when one of them changes or a bulk action reports progress (debounced: one per chunk).
  let selectedTimer = null;
  function refreshSelectedSoon() {
    if (!document.getElementById("bulk-selected")) return;
    window.clearTimeout(selectedTimer);
    selectedTimer = window.setTimeout(function () { dlq.refresh(["bulk-selected"]); }, 500);
  }
  function selectedHas(id) {
    const box = document.getElementById("bulk-selected");
    return box !== null && box.querySelector('li[data-id="' + id + '"]') !== null;
  }
  dlq.connect(function (msg) {
    if (msg.type === "dlq.bulk") { showProgress(msg); refreshSelectedSoon(); }
    if (msg.type === "dlq.message" && selectedHas(msg.id)) refreshSelectedSoon();
  }, function () { dlq.refresh(["bulk-list", "bulk-selected"]); });
  window.setInterval(poll, POLL_MS);
})();
