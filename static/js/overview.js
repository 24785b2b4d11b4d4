/* The overview, live: progress updates refresh a pipeline's rates and lag, status updates its state, alert
 * updates its alert badges (all over /ws/pipelines/). The DLQ backlog (parked dead letters) comes from a
 * second socket, /ws/dlq/: an arrival raises it at once by its count; a dead letter leaving "parked"
 * (replayed, skipped, deleted) carries no pipeline name, so the rows are re-read from
 * /pipelines/overview.json (debounced). After a reconnect the whole table is re-read too, since updates
 * sent while a socket was down are not replayed. */
"use strict";

(function () {
  const live = window.StreamForgeLive;
  const fmt = live.formatNumber;
  const jsonUrl = document.getElementById("overview-script").dataset.jsonUrl;

  function row(name) {
    return document.querySelector('tr[data-pipeline="' + CSS.escape(name) + '"]');
  }

  function setField(tr, field, text) {
    const cell = tr.querySelector('[data-field="' + field + '"]');
    if (cell && cell.textContent !== text) {
      cell.textContent = text;
      cell.classList.remove("flash-change");
      void cell.offsetWidth;  // restart the highlight animation
      cell.classList.add("flash-change");
    }
  }

  function showFigures(tr, figures) {
    setField(tr, "consumed_per_second", fmt(figures.consumed_per_second, 1));
    setField(tr, "produced_per_second", fmt(figures.produced_per_second, 1));
    setField(tr, "lag", fmt(figures.lag));
    const w = figures.worst_partition;
    setField(tr, "worst_partition", w ? w.topic + "/" + w.partition + ": " + fmt(w.lag) : "–");
  }

  function showState(tr, state) {
    const badge = tr.querySelector('[data-field="state"]');
    if (!badge) return;
    badge.textContent = state;
    badge.className = "state state-" + state;
  }

  // "r2", or "running r1, r2 saved" while the driver runs an older revision than the current one.
  function showRevisions(tr, current, running) {
    const el = tr.querySelector('[data-field="revision"]');
    if (!el || current === undefined || current === null) return;
    const stale = running !== null && running !== undefined && running !== current;
    el.textContent = stale ? "running r" + running + ", r" + current + " saved" : "r" + current;
    el.classList.toggle("revision-stale", stale);
  }

  function showAlerts(tr, alerts) {
    const cell = tr.querySelector('[data-field="alerts"]');
    cell.textContent = "";
    if (!alerts.length) {
      const none = document.createElement("span");
      none.className = "muted";
      none.textContent = "none";
      cell.appendChild(none);
    }
    alerts.forEach(function (alert) {
      const badge = document.createElement("span");
      badge.className = "alert alert-" + alert.severity;
      badge.dataset.rule = alert.rule;
      badge.title = alert.summary;
      badge.textContent = alert.rule;
      cell.appendChild(badge);
    });
  }

  function currentAlerts(tr) {
    return Array.from(tr.querySelectorAll("[data-rule]")).map(function (b) {
      return { rule: b.dataset.rule, severity: b.className.replace(/^alert alert-/, ""), summary: b.title };
    });
  }

  function onMessage(msg) {
    const tr = row(msg.pipeline);
    if (!tr) return;  // a pipeline created after this page loaded: it appears on the next reload
    if (msg.type === "pipeline.progress") {
      showFigures(tr, msg.figures);
    } else if (msg.type === "pipeline.status") {
      showState(tr, msg.state);
      showRevisions(tr, msg.revision, msg.running_revision);
    } else if (msg.type === "pipeline.alert") {
      const alerts = currentAlerts(tr).filter(function (a) { return a.rule !== msg.rule; });
      if (msg.firing) alerts.push({ rule: msg.rule, severity: msg.severity, summary: msg.summary });
      showAlerts(tr, alerts);
    }
  }

  function reload() {
    fetch(jsonUrl, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        data.pipelines.forEach(function (p) {
          const tr = row(p.name);
          if (!tr) return;
          showFigures(tr, p.figures);
          showState(tr, p.state);
          showRevisions(tr, p.revision, p.running_revision);
          showAlerts(tr, p.alerts);
          setField(tr, "dlq_backlog", fmt(p.dlq_backlog));
          tr.querySelector('[data-field="dlq_backlog"]').classList.toggle("muted", !p.dlq_backlog);
        });
      })
      .catch(function (e) { console.warn("overview reload failed", e); });
  }

  live.connect("/ws/pipelines/", { onMessage: onMessage, onReconnect: reload });

  let reloadTimer = null;
  function reloadSoon() {
    window.clearTimeout(reloadTimer);
    reloadTimer = window.setTimeout(reload, 500);  // a bulk replay sends an update per message
  }

  function onDlqMessage(msg) {
    if (msg.type === "dlq.arrived") {
      const tr = row(msg.pipeline);
      if (!tr) return;
      const cell = tr.querySelector('[data-field="dlq_backlog"]');
      const now = Number(cell.textContent.replace(/,/g, "")) + msg.count;
      setField(tr, "dlq_backlog", fmt(now));
      cell.classList.toggle("muted", now === 0);
    } else if (msg.type === "dlq.message" || msg.type === "dlq.bulk") {
      reloadSoon();  // a bulk action reports progress per chunk, not per message
    }
  }

  live.connect("/ws/dlq/", { onMessage: onDlqMessage, onReconnect: reload });
})();
