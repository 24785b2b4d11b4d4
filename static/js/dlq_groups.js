/* The failure groups page: dlq.arrived updates raise a shown group's counts (a group not shown offers a
 * reload), and admins write runbooks here (JSON to /api/dlq/runbooks/, then the groups are re-read). */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const runbooksUrl = document.getElementById("dlq-groups-script").dataset.runbooksUrl;

  function bump(cell, n) {
    if (!cell) return;
    const target = cell.querySelector("a") || cell;
    target.textContent = String(Number(target.textContent) + n);
    cell.classList.remove("flash-change"); void cell.offsetWidth; cell.classList.add("flash-change");
  }

  // A card and its buttons count the same set: every parked figure of a card (the tile, "Replay all N") is
  // raised together at an arrival, and the cards are re-read from the server (one query, one moment) after
  // any change: an arrival, a dead letter replayed / skipped / deleted, a bulk action's progress. Not while
  // a runbook is being edited on the page (that would wipe it): then a little later.
  let refreshTimer = null;
  function refreshSoon(delay) {
    window.clearTimeout(refreshTimer);
    refreshTimer = window.setTimeout(function () {
      if (document.querySelector("#groups details.runbook-edit[open]")) { refreshSoon(2000); return; }
      dlq.refresh(["groups"]);
    }, delay || 400);
  }

  dlq.connect(function (msg) {
    if (msg.type === "dlq.message" || msg.type === "dlq.bulk") { refreshSoon(); return; }
    if (msg.type !== "dlq.arrived") return;
    const card = document.querySelector('[data-group="' + msg.group + '"]');
    if (!card) { document.getElementById("new-groups").hidden = false; return; }
    card.querySelectorAll("[data-parked]").forEach(function (figure) { bump(figure, msg.count); });
    bump(card.querySelector('[data-field="count"]'), msg.count);
    bump(card.querySelector('[data-field="last_24h"]'), msg.count);  // an arrival now is in the last 24 h
    refreshSoon();
  }, function () { dlq.refresh(["groups"]); });

  document.addEventListener("submit", function (event) {
    const form = event.target.closest(".runbook-form");
    if (!form) return;
    event.preventDefault();
    const f = new FormData(form);
    const body = {
      title: (f.get("title") || "").trim(),
      body: f.get("body") || "",
      actions: f.getAll("actions"),
    };
    if (f.get("attach") === "group") {
      body.group = Number(form.dataset.groupId);
    } else {
      body.group = null;
      body.error_type = form.dataset.errorType;
      body.team = form.dataset.team;
    }
    const id = form.dataset.runbook;
    const error = form.querySelector("[data-form-error]");
    dlq.api(id ? "PUT" : "POST", id ? runbooksUrl + id + "/" : runbooksUrl, body).then(function (answer) {
      if (!answer.ok) { error.textContent = dlq.errorText(answer); error.hidden = false; return; }
      dlq.flash("Runbook “" + answer.data.title + "” saved.", "success");
      dlq.refresh(["groups"]);
    });
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-delete-runbook]");
    if (!button) return;
    const form = button.closest(".runbook-form");
    if (!window.confirm("Delete this runbook? Its text stays in the audit log's digest only.")) return;
    dlq.api("DELETE", runbooksUrl + form.dataset.runbook + "/").then(function (answer) {
      if (!answer.ok) { dlq.flash(dlq.errorText(answer), "error"); return; }
      dlq.flash("Runbook deleted.", "success");
      dlq.refresh(["groups"]);
    });
  });
})();
