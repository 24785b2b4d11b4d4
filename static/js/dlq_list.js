/* The dead-letter list, live: dlq.arrived messages that match the page's filters raise the counts and a
 * "N new — show" banner (on the newest page only: older pages are stable by design); "show" swaps in the
 * fresh rows without a reload and highlights them. dlq.message updates a shown row's status in place.
 * After a reconnect the counts and rows are re-read, since updates sent while away are not replayed.
 *
 * Working the rows: a click anywhere on a row opens its message (not on a link or checkbox, not while
 * selecting text; Ctrl/Cmd-click opens a tab); ticked rows make a selection with "replay / skip selected"
 * (a bulk action on exactly those ids, through the bulk form and its approval rules), "export selected"
 * (a CSV of exactly those ids) and "show only these"; keyboard: j/k move, o or Enter opens, x ticks, / searches, ? lists the keys. */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const match = JSON.parse(document.getElementById("dlq-live-match").textContent);
  const newest = document.getElementById("dlq-list-script").dataset.newest === "true";
  let unseen = 0;

  function matches(msg) {
    if (!match.possible) return false;
    if (match.pipeline && msg.pipeline !== match.pipeline) return false;
    if (match.error_type && msg.error_type !== match.error_type) return false;
    if (match.group !== null && msg.group !== match.group) return false;
    return true;
  }

  function bump(status, n, alsoAll) {
    (alsoAll ? [status, "all"] : [status]).forEach(function (s) {
      const el = document.querySelector('#status-tabs [data-status="' + s + '"] [data-count]');
      if (!el) return;
      el.textContent = String(Number(el.textContent) + n);
      el.classList.remove("flash-change"); void el.offsetWidth; el.classList.add("flash-change");
    });
  }

  function topId() {
    const first = document.querySelector("#dlq-rows tr[data-id]");
    return first ? Number(first.dataset.id) : 0;
  }

  function showNew() {
    const before = topId();
    unseen = 0;
    document.getElementById("new-banner").hidden = true;
    dlq.refresh(["status-tabs", "dlq-rows"]).then(function () {
      syncSelection();
      cursor = -1;
      document.querySelectorAll("#dlq-rows tr[data-id]").forEach(function (tr) {
        if (Number(tr.dataset.id) > before) tr.classList.add("flash-change", "new-row");
      });
    });
  }

  document.getElementById("show-new").addEventListener("click", showNew);

  function onMessage(msg) {
    if (msg.type === "dlq.arrived") {
      if (!matches(msg)) return;
      bump("parked", msg.count, true);
      if (!newest) return;
      unseen += msg.count;
      const banner = document.getElementById("new-banner");
      banner.querySelector("[data-new-count]").textContent = String(unseen);
      banner.hidden = false;
    } else if (msg.type === "dlq.message") {
      const badge = document.querySelector('#dlq-rows tr[data-id="' + msg.id + '"] [data-field="status"]');
      if (badge && badge.textContent !== msg.status) {
        bump(badge.textContent, -1, false);
        bump(msg.status, 1, false);
        badge.textContent = msg.status;
        badge.className = "state status-" + msg.status + " flash-change";
      }
    }
  }

  // A bulk action reports progress per chunk, not per message: re-read the counts when it moves.
  let countsTimer = null;
  function onAny(msg) {
    if (msg.type === "dlq.bulk") {
      window.clearTimeout(countsTimer);
      countsTimer = window.setTimeout(function () { dlq.refresh(["status-tabs"]); }, 1000);
      return;
    }
    onMessage(msg);
  }

  dlq.connect(onAny, function () {
    dlq.refresh(newest ? ["status-tabs", "dlq-rows"] : ["status-tabs"]).then(syncSelection);
  });

  // ---------------------------------------------------------------------------------------- selection
  const selected = new Set();  // ids (strings) ticked on this page
  const bar = document.getElementById("selection-bar");

  function boxes() { return Array.from(document.querySelectorAll("#dlq-rows [data-select]")); }

  function syncSelection() {
    const all = boxes();
    all.forEach(function (box) { box.checked = selected.has(box.dataset.select); });
    const ticked = all.filter(function (box) { return box.checked; }).length;
    const pageBox = document.getElementById("select-page");
    if (pageBox) {
      pageBox.checked = ticked > 0 && ticked === all.length;
      pageBox.indeterminate = ticked > 0 && ticked < all.length;
    }
    bar.hidden = selected.size === 0;
    bar.querySelector("[data-selected-count]").textContent = String(selected.size);
  }

  function tick(id, on) { if (on) selected.add(id); else selected.delete(id); }

  document.addEventListener("change", function (event) {
    const target = event.target;
    if (target.dataset.select) {
      tick(target.dataset.select, target.checked);
      syncSelection();
    } else if (target.id === "select-page") {
      boxes().forEach(function (box) { tick(box.dataset.select, target.checked); });
      syncSelection();
    } else if (target.hasAttribute("data-autosubmit")) {
      target.form.submit();
    }
  });
  document.getElementById("clear-selection").addEventListener("click", function () { selected.clear(); syncSelection(); });

  bar.querySelectorAll("[data-selection-action]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      const ids = "ids=" + Array.from(selected).join(",");
      const action = link.dataset.selectionAction;
      if (action === "export") window.location.href = bar.dataset.exportUrl + "?as=csv&" + ids;
      else window.location.href = action === "list" ? bar.dataset.listUrl + "?" + ids : bar.dataset.bulkUrl + "?" + ids + "&kind=" + action;
    });
  });

  // ---------------------------------------------------------------------------------------- opening rows
  function open(tr, newTab) {
    if (newTab) window.open(tr.dataset.href, "_blank", "noopener");
    else window.location.href = tr.dataset.href;
  }

  document.addEventListener("click", function (event) {
    const tr = event.target.closest("#dlq-rows tr[data-href]");
    if (!tr || event.target.closest("a, button, input, label, select, textarea")) return;
    if (String(window.getSelection ? window.getSelection() : "")) return;  // selecting text to copy it
    open(tr, event.ctrlKey || event.metaKey);
  });

  // ---------------------------------------------------------------------------------------- keyboard
  let cursor = -1;
  function rows() { return Array.from(document.querySelectorAll("#dlq-rows tr[data-href]")); }
  function move(by) {
    const all = rows();
    if (!all.length) return;
    cursor = Math.max(0, Math.min(all.length - 1, cursor + by));
    all.forEach(function (tr, i) { tr.classList.toggle("cursor", i === cursor); });
    all[cursor].scrollIntoView({ block: "nearest" });
  }

  window.StreamForgeKeys.bind({
    j: function () { move(1); },
    k: function () { move(-1); },
    o: function () { const tr = rows()[cursor]; if (tr) open(tr, false); },
    Enter: function () { const tr = rows()[cursor]; if (tr) open(tr, false); },
    x: function () {
      const tr = rows()[cursor];
      if (!tr) return;
      const box = tr.querySelector("[data-select]");
      tick(box.dataset.select, !box.checked);
      syncSelection();
    },
  }, { "j / k": "next / previous dead letter", "o or Enter": "open it", x: "tick it (select)" });
})();
