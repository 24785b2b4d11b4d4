/* The dead-letter list, live: dlq.arrived messages that match the page's filters raise the counts and a
 * "N new — show" banner (on the newest page only: older pages are stable by design); "show" swaps in the
 * fresh rows without a reload and highlights them. dlq.message updates a shown row's status in place.
 * After a reconnect the counts and rows are re-read, since updates sent while away are not replayed. */
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

  dlq.connect(onAny, function () { dlq.refresh(newest ? ["status-tabs", "dlq-rows"] : ["status-tabs"]); });
})();
