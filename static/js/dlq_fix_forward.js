// A fix-forward scan's page while the scan runs: its progress and counts from the API every second; the page
// reloads once the scan has ended, to show its groups and the replay offer.
(function () {
  "use strict";
  const card = document.getElementById("fix-forward");
  if (!card || !card.hasAttribute("data-live")) return;

  function field(name) { return card.querySelector('[data-field="' + name + '"]'); }

  function show(scan) {
    const bar = field("bar");
    bar.max = scan.total || 1;
    bar.value = scan.total ? scan.checked : 1;
    field("state").textContent = scan.state;
    field("checked").textContent = scan.checked + " of " + scan.total + " parked dead letters of older revisions checked";
    ["candidates", "still_failing", "unchanged", "unknown"].forEach(function (name) {
      field(name).textContent = String(scan[name]);
    });
  }

  function poll() {
    fetch(card.dataset.api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (answer) { return answer.ok ? answer.json() : null; })
      .then(function (scan) {
        if (!scan) { window.setTimeout(poll, 3000); return; }
        show(scan);
        if (scan.state === "done" || scan.state === "failed") window.location.reload();
        else window.setTimeout(poll, 1000);
      })
      .catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 1000);
})();
