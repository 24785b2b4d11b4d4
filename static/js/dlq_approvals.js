/* The approvals queue, live: any DLQ update (a request decided elsewhere, a dead letter deleted, a bulk
 * action queued) re-reads the two lists and the header's badge; approve / reject go through dlq.js. */
"use strict";

(function () {
  const dlq = window.StreamForgeDlq;
  const SECTIONS = ["approvals-pending", "approvals-decided", "nav-approvals"];
  let timer = null;

  function later() {
    // Debounced: a bulk run sends many updates, one re-read is enough.
    window.clearTimeout(timer);
    timer = window.setTimeout(function () { dlq.refresh(SECTIONS); }, 500);
  }

  dlq.connect(function (msg) {
    if (msg.type === "dlq.message" || (msg.type === "dlq.bulk" && msg.state !== "running")) later();
  }, later);
})();
