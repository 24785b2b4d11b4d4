/* A pipeline's page, live: charts drawn with Chart.js from /api/pipelines/<name>/metrics/?range=… (the
 * history, in buckets of `bucket_seconds`) and extended by /ws/pipelines/<name>/ progress updates, which are
 * folded into the same buckets so live and historical points mean the same thing. Also the stat tiles,
 * the state badge, firing alerts, and the confirmation dialog of start / stop / restart. */
"use strict";

(function () {
  const live = window.StreamForgeLive;
  const fmt = live.formatNumber;
  const script = document.getElementById("pipeline-script");
  const name = script.dataset.name;
  const range = Number(script.dataset.range);
  const metricsUrl = script.dataset.metricsUrl + "?range=" + range;

  // ---------------------------------------------------------------------------------------- confirmation
  const dialog = document.getElementById("confirm-dialog");
  if (dialog) {
    const form = document.getElementById("confirm-form");
    const texts = {
      start: "Start the current revision. A worker launches the Spark driver.",
      restart: "Stop the driver after its running micro-batch, then start the current revision again.",
      stop: "Stop after the running micro-batch finishes; records keep arriving in the source topic and the lag grows.",
    };
    document.querySelectorAll("[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function () {
        const action = button.dataset.confirm;
        form.action = form.dataset.actionTemplate.replace("ACTION", action);
        document.getElementById("confirm-title").textContent = action.charAt(0).toUpperCase() + action.slice(1) + " " + name + "?";
        document.getElementById("confirm-text").textContent = texts[action];
        const submit = document.getElementById("confirm-submit");
        submit.textContent = action.charAt(0).toUpperCase() + action.slice(1);
        submit.className = action === "stop" ? "danger" : "";
        dialog.showModal();
      });
    });
    document.getElementById("confirm-cancel").addEventListener("click", function () { dialog.close(); });
  }

  // ---------------------------------------------------------------------------------------- charts
  // Colours come from the theme's CSS custom properties (static/css/theme.css, #rrggbb), re-read when the
  // theme changes: series by role; axis text, grid lines and legend set on each chart's own options (a chart
  // keeps what it resolved from Chart.defaults when it was made).
  const theme = window.StreamForgeTheme;
  const roles = { consumed: "--accent", produced: "--ok", dead: "--bad", lag: "--warn", duration: "--info", retries: "--chart-orange" };
  function themeColors() {
    const palette = { text: theme.color("--chart-text"), grid: theme.color("--chart-grid") };
    Object.keys(roles).forEach(function (role) { palette[role] = theme.color(roles[role]); });
    return palette;
  }
  let palette = themeColors();
  Chart.defaults.font.size = 11;

  function themed(options) {
    Object.keys(options.scales).forEach(function (axis) {
      const scale = options.scales[axis];
      scale.ticks = Object.assign(scale.ticks || {}, { color: palette.text });
      scale.grid = Object.assign(scale.grid || {}, { color: palette.grid });
      scale.border = Object.assign(scale.border || {}, { color: palette.grid });
    });
    const legend = options.plugins.legend;
    legend.labels = Object.assign(legend.labels || {}, { color: palette.text });
    return options;
  }
  Chart.defaults.animation = false;

  // Time labels: UTC or local as the header says (localtime.js), with seconds in a short window and the date in
  // a long one.
  const clock = window.StreamForgeTime;
  // The 7-day window's ticks fall on midnights (of the zone shown) and read as a date ("Nov 20"); its hourly
  // points' tooltips say the date and hour.
  function timeTick(value) {
    if (range > 2 * 86400) return clock.format(value, "H:i") === "00:00" ? clock.format(value, "M j") : clock.format(value, "M j H:i");
    return clock.format(value, range > 86400 ? "M j H:i" : range <= 600 ? "H:i:s" : "H:i");
  }
  function pointTime(value) {
    return clock.format(value, range > 86400 ? "M j H:i" : range <= 600 ? "H:i:s" : "H:i");
  }
  function zoneName() { return clock.mode() === "local" ? "local time (UTC" + clock.zone() + ")" : "UTC"; }

  // Ticks on round times (every 1, 2, 5... minutes or hours), four to eight across the window whatever its length.
  const STEPS_S = [10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function roundTicks(axis) {
    const span = (axis.max - axis.min) / 1000;
    const step = (STEPS_S.find(function (s) { return span / s <= 8; }) || 86400) * 1000;
    const ticks = [];
    const shift = clock.offsetMs(axis.min);  // round in the zone shown: 10:00 local, not 10:30 at +05:30
    for (let t = Math.ceil((axis.min + shift) / step) * step - shift; t <= axis.max; t += step) ticks.push({ value: t });
    axis.ticks = ticks;
  }

  function lineChart(id, datasets) {
    return new Chart(document.getElementById(id), {
      type: "line",
      data: { datasets: datasets.map(function (d) {
        return { label: d.label, role: d.role, data: [], borderColor: palette[d.role], backgroundColor: palette[d.role] + "33", pointRadius: 2, pointHoverRadius: 4, borderWidth: 1.5, tension: 0.2, fill: d.fill || false };
      }) },
      options: themed({
        parsing: false, responsive: true, maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", afterBuildTicks: roundTicks, ticks: { callback: timeTick, autoSkip: false, maxRotation: 0 } },
          y: { beginAtZero: true, ticks: { maxTicksLimit: 5 } },
        },
        plugins: { legend: { display: datasets.length > 1, labels: { boxWidth: 10 } },
                   tooltip: { callbacks: { title: function (items) { return items.length ? pointTime(items[0].parsed.x) + " " + clock.zone(items[0].parsed.x) : ""; } } } },
      }),
    });
  }

  function barChart(id, role, horizontal) {
    return new Chart(document.getElementById(id), {
      type: "bar",
      data: { labels: [], datasets: [{ role: role, bar: true, data: [], backgroundColor: palette[role], borderRadius: 3 }] },
      options: themed({
        indexAxis: horizontal ? "y" : "x", responsive: true, maintainAspectRatio: false,
        scales: { x: { beginAtZero: true, ticks: { maxTicksLimit: 6 } }, y: { beginAtZero: true, ticks: { maxTicksLimit: 6 } } },
        plugins: { legend: { display: false } },
      }),
    });
  }

  const charts = {
    rates: lineChart("chart-rates", [
      { label: "consumed", role: "consumed" }, { label: "produced", role: "produced" }, { label: "dead-lettered", role: "dead" },
    ]),
    lag: lineChart("chart-lag", [{ label: "lag", role: "lag", fill: true }]),
    duration: lineChart("chart-duration", [{ label: "ms", role: "duration" }]),
    retries: lineChart("chart-retries", [{ label: "retries", role: "retries" }]),
    partitions: barChart("chart-partitions", "lag", false),
    dlq: barChart("chart-dlq", "dead", true),
  };

  document.addEventListener("streamforge:theme", function () {
    palette = themeColors();
    Object.keys(charts).forEach(function (c) {
      themed(charts[c].config.options);
      charts[c].data.datasets.forEach(function (d) {
        const color = palette[d.role];
        d.backgroundColor = d.bar ? color : color + "33";
        if (!d.bar) d.borderColor = color;
      });
      charts[c].update("none");
    });
  });

  document.addEventListener("streamforge:time", function () {
    Object.keys(charts).forEach(function (c) { charts[c].update("none"); });
    const bucketNote = document.getElementById("chart-bucket");
    if (bucketNote) bucketNote.textContent = bucketNote.textContent.replace(/, [^,]*$/, ", " + zoneName());
  });

  // Buckets keyed by start time (ms): sums of the batches in them, like the server's metric_series.
  let bucketMs = 5000;
  let buckets = new Map();

  function addToBucket(time, batch) {
    const start = Math.floor(time / bucketMs) * bucketMs;
    const b = buckets.get(start) || { batches: 0, consumed: 0, produced: 0, dead_lettered: 0, retries: 0, lag: null, durationSum: 0 };
    b.batches += batch.batches;
    b.consumed += batch.consumed; b.produced += batch.produced; b.dead_lettered += batch.dead_lettered; b.retries += batch.retries;
    if (batch.lag !== null && batch.lag !== undefined) b.lag = b.lag === null ? batch.lag : Math.max(b.lag, batch.lag);
    b.durationSum += batch.durationSum;
    buckets.set(start, b);
  }

  // One point per bucket that holds batches. A bucket without any (the driver stopped, or idle: Spark runs
  // no empty micro-batches) becomes a gap in every line rather than a ramp drawn across it. The newest
  // bucket is still filling: rates leave it out (its sum would dip towards zero at "now"); the gauges (lag,
  // batch duration, retries per batch) show it.
  function redrawSeries() {
    const now = Date.now();
    const since = now - range * 1000;
    Array.from(buckets.keys()).forEach(function (k) { if (k < since - bucketMs) buckets.delete(k); });
    const keys = Array.from(buckets.keys()).sort(function (a, b) { return a - b; });
    const points = [];
    keys.forEach(function (k, i) {
      if (i > 0 && k - keys[i - 1] > bucketMs) points.push({ x: keys[i - 1] + bucketMs, b: null });
      points.push({ x: k, b: buckets.get(k) });
    });
    const complete = points.filter(function (p) { return p.x + bucketMs <= now; });
    const perSecond = bucketMs / 1000;
    const pick = function (list, f) { return list.map(function (p) { return { x: p.x, y: p.b ? f(p.b) : null }; }); };
    charts.rates.data.datasets[0].data = pick(complete, function (b) { return b.consumed / perSecond; });
    charts.rates.data.datasets[1].data = pick(complete, function (b) { return b.produced / perSecond; });
    charts.rates.data.datasets[2].data = pick(complete, function (b) { return b.dead_lettered / perSecond; });
    charts.lag.data.datasets[0].data = pick(points, function (b) { return b.lag; });
    charts.duration.data.datasets[0].data = pick(points, function (b) { return b.batches ? b.durationSum / b.batches : null; });
    charts.retries.data.datasets[0].data = pick(points, function (b) { return b.batches ? b.retries / b.batches : null; });
    ["rates", "lag", "duration", "retries"].forEach(function (c) {
      charts[c].options.scales.x.min = since; charts[c].options.scales.x.max = now;
      charts[c].update("none");
    });
  }

  const partitionLag = new Map();  // "topic/partition" -> lag
  function redrawPartitions() {
    const labels = Array.from(partitionLag.keys()).sort();
    charts.partitions.data.labels = labels;
    charts.partitions.data.datasets[0].data = labels.map(function (l) { return partitionLag.get(l); });
    charts.partitions.update("none");
  }

  const dlqByType = new Map(Object.entries(JSON.parse(document.getElementById("dlq-by-type").textContent)));
  function redrawDlq() {
    const entries = Array.from(dlqByType.entries()).sort(function (a, b) { return b[1] - a[1]; });
    charts.dlq.data.labels = entries.map(function (e) { return e[0]; });
    charts.dlq.data.datasets[0].data = entries.map(function (e) { return e[1]; });
    charts.dlq.update("none");
  }

  // ---------------------------------------------------------------------------------------- tiles
  function setStat(stat, text) {
    const el = document.querySelector('[data-stat="' + stat + '"]');
    if (el && el.textContent !== text) {
      el.textContent = text;
      el.classList.remove("flash-change"); void el.offsetWidth; el.classList.add("flash-change");
    }
  }

  function showFigures(f) {
    setStat("consumed_per_second", fmt(f.consumed_per_second, 1));
    setStat("produced_per_second", fmt(f.produced_per_second, 1));
    setStat("lag", fmt(f.lag));
    const w = f.worst_partition;
    setStat("worst_partition", w ? w.topic + "/" + w.partition + ": " + fmt(w.lag) : "–");
    setStat("dead_lettered", fmt(f.dead_lettered));
    setStat("dlq_records", fmt(f.dlq_records));
    if (f.dlq_backlog !== undefined) setStat("dlq_backlog", fmt(f.dlq_backlog));
  }

  function showLastBatch(batch) {
    if (!batch) return;
    setStat("last_batch", "#" + batch.batch_id + " · " + fmt(batch.consumed) + " rec · " + fmt(batch.duration_ms) + " ms");
    document.querySelector('[data-stat="last_batch"]').title = "at " + clock.stamp(batch.time_ms, "Y-m-d H:i:s");
  }

  function showState(state, desired, reason) {
    const badge = document.querySelector('#pipeline [data-field="state"]');
    badge.textContent = state; badge.className = "state state-" + state;
    if (desired) document.querySelector('[data-field="desired_state"]').textContent = desired;
    const reasonEl = document.querySelector('#pipeline [data-field="reason"]');
    reasonEl.textContent = reason || ""; reasonEl.hidden = !reason;
  }

  // Start / stop / restart enabled as the server says they are worth offering (lifecycle.available_actions).
  const whyNot = {
    start: "already wanted running; stop it first, or restart",
    stop: "not wanted running: nothing to stop",
    restart: "no driver runs or waits for a restart: use start",
  };
  function showActions(actions) {
    if (!actions) return;
    document.querySelectorAll("#pipeline [data-lifecycle]").forEach(function (button) {
      const offered = actions.indexOf(button.dataset.lifecycle) >= 0;
      button.disabled = !offered;
      button.title = offered ? "" : whyNot[button.dataset.lifecycle];
    });
  }

  // "running r1, r2 saved": the driver runs an older revision than the current one until a restart.
  function showRevisions(current, running) {
    const shown = document.querySelector('#pipeline [data-field="revision"]');
    if (!shown || current === undefined) return;
    const stale = running !== null && running !== undefined && running !== current;
    shown.textContent = stale ? "running r" + running + ", r" + current + " saved" : "revision " + current;
    const note = document.querySelector('#pipeline [data-field="revision-note"]');
    note.hidden = !stale;
    if (stale) {
      note.querySelector('[data-field="running-revision"]').textContent = running;
      note.querySelector('[data-field="current-revision"]').textContent = current;
    }
  }
  document.querySelectorAll("#pipeline [data-lifecycle]").forEach(function (button) {
    if (button.disabled) button.title = whyNot[button.dataset.lifecycle];
  });

  const alerts = new Map();
  function showAlerts() {
    const box = document.querySelector('#pipeline [data-field="alerts"]');
    box.textContent = "";
    alerts.forEach(function (a, rule) {
      const el = document.createElement("div");
      el.className = "alert-banner alert-" + a.severity;
      el.dataset.rule = rule;
      // The summary names the rule's window ("… in the last 15 minutes"); since when it fires is added.
      el.textContent = rule + ": " + a.summary + (a.since ? " · firing since " + clock.stamp(a.since, "M j H:i") : "");
      box.appendChild(el);
    });
  }

  // ---------------------------------------------------------------------------------------- data flow
  // The metrics request can take seconds (it asks Kafka for the consumer group's lag), and live messages
  // keep arriving meanwhile: what it answers must not overwrite them. Progress newer than the answer's last
  // batch is applied again on top of it; a state or alert message received while it was in flight wins.
  const recentProgress = [];  // the latest live progress messages, oldest first
  let statusMessages = 0;     // state / alert messages received so far

  function applyProgress(msg, countDeadLetters) {
    addToBucket(msg.time_ms, { batches: 1, consumed: msg.consumed, produced: msg.produced, dead_lettered: msg.dead_lettered,
                               retries: msg.retries, lag: msg.lag, durationSum: msg.duration_ms });
    redrawSeries();
    msg.partitions.forEach(function (p) { partitionLag.set(p.topic + "/" + p.partition, p.lag); });
    redrawPartitions();
    if (countDeadLetters) {
      Object.entries(msg.dead_lettered_by_type || {}).forEach(function (e) { dlqByType.set(e[0], (dlqByType.get(e[0]) || 0) + e[1]); });
      redrawDlq();
    }
    showFigures(msg.figures);
    showLastBatch(msg);
  }

  function load() {
    const statusBefore = statusMessages;
    return fetch(metricsUrl, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (m) {
        bucketMs = (m.bucket_seconds || 5) * 1000;
        const bucketNote = document.getElementById("chart-bucket");
        if (bucketNote) bucketNote.textContent = (m.bucket_seconds === 3600 ? "· hourly points" : "· points of " + (m.bucket_seconds > 3600 ? m.bucket_seconds / 3600 + " h" : m.bucket_seconds >= 60 ? m.bucket_seconds / 60 + " min" : m.bucket_seconds + " s")) + ", " + zoneName();
        buckets = new Map();
        (m.series || []).forEach(function (p) {
          addToBucket(p.time_ms, { batches: p.batches, consumed: p.consumed, produced: p.produced, dead_lettered: p.dead_lettered,
                                   retries: p.retries, lag: p.lag, durationSum: (p.duration_ms || 0) * p.batches });
        });
        redrawSeries();
        partitionLag.clear();
        m.partitions.forEach(function (p) { partitionLag.set(p.topic + "/" + p.partition, p.lag); });
        redrawPartitions();
        const worst = m.partitions.reduce(function (w, p) { return w === null || p.lag > w.lag ? p : w; }, null);
        showFigures({ consumed_per_second: m.rates.consumed_per_second, produced_per_second: m.rates.produced_per_second,
                      lag: m.lag, worst_partition: worst, dead_lettered: m.totals.dead_lettered,
                      dlq_records: m.totals.dlq_records, dlq_backlog: m.dlq_backlog });
        showLastBatch(m.last_batch);
        const answered = m.last_batch ? m.last_batch.time_ms : 0;
        recentProgress.filter(function (msg) { return msg.time_ms > answered; })
          .forEach(function (msg) { applyProgress(msg, false); });  // the page's own total already counts them
        if (statusMessages === statusBefore) {
          showState(m.state, m.desired_state, document.querySelector('#pipeline [data-field="reason"]').textContent);
          showActions(m.actions);
          showRevisions(m.revision, m.running_revision);
          alerts.clear();
          m.alerts.forEach(function (a) { alerts.set(a.rule, a); });
          showAlerts();
        }
      })
      .catch(function (e) { console.warn("metrics load failed", e); });
  }

  // ---------------------------------------------------------------------------------------- runs, live
  // The Runs table's rows are re-read from ?runs=1 (server-rendered, the same template as the page) when a
  // status message says the driver changed state, after a reconnect, and every 15 s while the tab is shown;
  // not while a driver log is open (it would be wiped while read).
  const runTable = document.getElementById("run-table");
  let runsTimer = null;
  function refreshRuns() {
    window.clearTimeout(runsTimer);
    runsTimer = null;
    if (!runTable || document.hidden || runTable.querySelector("details[open]")) return;
    fetch(runTable.dataset.rowsUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok && !r.redirected ? r.text() : Promise.reject(r.status); })
      .then(function (rows) {
        if (runTable.querySelector("details[open]")) return;
        runTable.tBodies[0].innerHTML = rows;
        const any = runTable.tBodies[0].rows.length > 0;
        runTable.hidden = !any;
        document.getElementById("runs-empty").hidden = any;
        clock.apply(runTable);
        document.getElementById("runs-refreshed").textContent = "· live, refreshed at " + clock.format(Date.now(), "H:i:s");
      })
      .catch(function (e) { console.warn("runs refresh failed", e); });
  }
  function refreshRunsSoon() {
    if (runsTimer === null) runsTimer = window.setTimeout(refreshRuns, 300);  // a restart sends several updates
  }
  window.setInterval(refreshRuns, 15000);

  // The backlog tile (dead letters parked now) follows the DLQ console: an arrival for this pipeline raises it
  // by its count; one leaving "parked" (replayed, skipped, deleted) names no pipeline, so the figures are
  // re-read (debounced: a bulk action reports per chunk).
  let backlogTimer = null;
  function onDlqMessage(msg) {
    if (msg.type === "dlq.arrived") {
      if (msg.pipeline !== name) return;
      const el = document.querySelector('[data-stat="dlq_backlog"]');
      setStat("dlq_backlog", fmt(Number(el.textContent.replace(/[^0-9]/g, "")) + msg.count));
    } else if (msg.type === "dlq.message" || msg.type === "dlq.bulk") {
      window.clearTimeout(backlogTimer);
      backlogTimer = window.setTimeout(load, 1000);
    }
  }

  function onMessage(msg) {
    if (msg.pipeline !== name) return;
    if (msg.type === "pipeline.progress") {
      recentProgress.push(msg);
      if (recentProgress.length > 500) recentProgress.shift();
      applyProgress(msg, true);
    } else if (msg.type === "pipeline.status") {
      statusMessages += 1;
      showState(msg.state, msg.desired_state, msg.reason);
      showActions(msg.actions);
      showRevisions(msg.revision, msg.running_revision);
      refreshRunsSoon();
    } else if (msg.type === "pipeline.alert") {
      statusMessages += 1;
      if (msg.firing) alerts.set(msg.rule, msg); else alerts.delete(msg.rule);
      showAlerts();
    }
  }

  redrawDlq();
  load();
  live.connect("/ws/pipelines/" + name + "/", { onMessage: onMessage, onReconnect: function () { load(); refreshRuns(); } });
  live.connect("/ws/dlq/", { onMessage: onDlqMessage, onReconnect: load });
  window.setInterval(redrawSeries, 5000);  // slide the time window even when no batch arrives
})();
