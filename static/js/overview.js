/* The overview, live: progress updates refresh a pipeline's rates, lag and dead-lettered count, status
 * updates its state, alert updates its alert badges. After a reconnect the whole table is reloaded from
 * /pipelines/overview.json, since updates sent while the socket was down are not replayed. */
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
    setField(tr, "dead_lettered", fmt(figures.dead_lettered));
  }

  function showState(tr, state) {
    const badge = tr.querySelector('[data-field="state"]');
    if (!badge) return;
    badge.textContent = state;
    badge.className = "state state-" + state;
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
          showAlerts(tr, p.alerts);
        });
      })
      .catch(function (e) { console.warn("overview reload failed", e); });
  }

  live.connect("/ws/pipelines/", { onMessage: onMessage, onReconnect: reload });
})();
