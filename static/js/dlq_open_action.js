/* A dead letter's page opened by a runbook action (…/dlq/messages/<id>/?action=fix|replay|skip|request_delete):
 * the action it names is made ready, never carried out: "fix" scrolls to the fix editor and puts the cursor in
 * it; "skip" and "request_delete" open their confirmation dialog (which asks for the reason); "replay" opens its
 * confirmation when it has one and otherwise scrolls to the Replay button and focuses it (one more click sends
 * it). When the action is not on offer (not parked, a delete pending, a viewer) the page says why. The
 * parameter is then dropped from the address, so a reload does not open it again. */
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  const action = params.get("action");
  if (!action) return;
  const dlq = window.StreamForgeDlq;
  const names = { fix: "Fix", replay: "Replay", skip: "Skip", request_delete: "Request delete" };
  const targets = {
    fix: "#fix-text",
    replay: "[data-testid=replay]",
    skip: "[data-testid=skip]",
    request_delete: "[data-testid=request-delete]",
  };
  params.delete("action");
  const rest = params.toString();
  window.history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : "") + window.location.hash);
  if (!targets[action]) return;

  const el = document.querySelector(targets[action]);
  if (!el || el.disabled) {
    const why = el && el.title ? ": " + el.title : ": this dead letter is not parked, or your role does not allow it";
    if (dlq && dlq.flash) dlq.flash("“" + names[action] + "” is not available here" + why + ".", "error");
    return;
  }
  el.scrollIntoView({ block: "center" });
  if (action === "fix") {
    el.focus();
  } else if (action === "replay" && !el.dataset.post) {
    el.focus();
    el.classList.add("action-ready");
  } else {
    el.click();  // opens its confirmation dialog
  }
})();
