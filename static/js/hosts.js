/* The Hosts page, live: every few seconds (the table's data-refresh-s) its rows are re-read from
 * /hosts/?rows=1 (server-rendered, the same template as the page) so heartbeat ages, states, capacity and
 * the pipelines on each host follow what the runners report. A refresh is skipped while a drain or undrain
 * form is open (it would be wiped mid-typing) or the tab is hidden; a signed-out session (the answer is the
 * login page) stops it and says so. */
"use strict";

(function () {
  const table = document.getElementById("host-table");
  const status = document.getElementById("hosts-refreshed");
  if (!table || !status) {
    return;
  }
  const url = table.dataset.rowsUrl;
  const every = Math.max(1, Number(table.dataset.refreshS) || 5) * 1000;
  let timer = null;

  function busy() {
    return document.hidden || table.querySelector("details[open]") !== null;
  }

  async function refresh() {
    if (busy()) {
      return;
    }
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (response.redirected || !response.ok) {
        status.textContent = response.redirected
          ? "live refresh stopped: signed out, reload the page"
          : "live refresh failed (HTTP " + response.status + "); trying again";
        if (response.redirected) {
          window.clearInterval(timer);
        }
        return;
      }
      const rows = await response.text();
      if (!busy()) {
        table.tBodies[0].innerHTML = rows;
        status.textContent = "live: refreshed at " + new Date().toLocaleTimeString();
      }
    } catch (err) {
      status.textContent = "live refresh failed (" + err.message + "); trying again";
    }
  }

  timer = window.setInterval(refresh, every);
})();
