/* StreamForge live updates: one websocket per page, reconnected with exponential backoff and jitter, with
 * the header's indicator showing "live", "reconnecting" or "offline". The server closes with 4401 (not
 * signed in) or 4404 (not your pipeline): those are final, retrying cannot help. Any other close (server
 * restart, Redis blip: 1011, network) retries after 1 s, 2 s, 4 s ... up to 30 s; after a reconnect the
 * page's onReconnect reloads what it may have missed, because updates sent while away are not replayed. */
"use strict";

window.StreamForgeLive = (function () {
  const FINAL_CODES = new Set([4401, 4403, 4404]);
  const BASE_DELAY_MS = 1000;
  const MAX_DELAY_MS = 30000;

  // A page may hold more than one socket (the overview: pipelines and DLQ); the indicator shows the worst.
  const RANK = { offline: 3, reconnecting: 2, connecting: 1, live: 0 };
  const sockets = [];

  function showWorst() {
    const worst = sockets.reduce(function (w, s) { return RANK[s.state] > RANK[w.state] ? s : w; }, sockets[0]);
    if (worst) setIndicator(worst.state, worst.text);
  }

  function setIndicator(state, text) {
    const el = document.getElementById("live-indicator");
    if (!el) return;
    el.dataset.state = state;
    el.className = "live live-" + state;
    el.textContent = text;
  }

  /**
   * connect(path, {onMessage(json), onReconnect()}) opens ws(s)://<host><path> and keeps it open.
   * Returns {close()} to stop for good.
   */
  function connect(path, handlers) {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const url = scheme + window.location.host + path;
    let socket = null;
    let failures = 0;
    let everOpened = false;
    let stopped = false;
    let timer = null;
    const mine = { state: "connecting", text: "connecting" };
    sockets.push(mine);
    function report(state, text) { mine.state = state; mine.text = text; showWorst(); }

    function open() {
      timer = null;
      socket = new WebSocket(url);
      socket.onopen = function () {
        const reconnected = everOpened;
        everOpened = true;
        failures = 0;
        report("live", "live");
        if (reconnected && handlers.onReconnect) handlers.onReconnect();
      };
      socket.onmessage = function (event) {
        let data;
        try { data = JSON.parse(event.data); } catch (e) { return; }
        try { handlers.onMessage(data); } catch (e) { console.error("live update failed", e); }
      };
      socket.onclose = function (event) {
        socket = null;
        if (stopped) return;
        if (FINAL_CODES.has(event.code)) {
          report("offline", event.code === 4401 ? "signed out" : "not allowed");
          return;
        }
        failures += 1;
        const ceiling = Math.min(MAX_DELAY_MS, BASE_DELAY_MS * Math.pow(2, failures - 1));
        const delay = ceiling / 2 + Math.random() * ceiling / 2;  // jitter: many tabs do not retry in step
        report("reconnecting", "reconnecting");
        timer = window.setTimeout(open, delay);
      };
    }

    // A laptop waking up or a network coming back should not wait out a long backoff.
    window.addEventListener("online", function () {
      if (!stopped && timer !== null) { window.clearTimeout(timer); open(); }
    });
    open();
    return {
      close: function () { stopped = true; if (timer) window.clearTimeout(timer); if (socket) socket.close(); },
    };
  }

  function formatNumber(value, digits) {
    if (value === null || value === undefined) return "–";
    return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits || 0 });
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  /** Whether every socket of the page is open (pages poll as a fallback while one is not). */
  function isLive() {
    return sockets.length > 0 && sockets.every(function (s) { return s.state === "live"; });
  }

  return { connect: connect, formatNumber: formatNumber, csrfToken: csrfToken, setIndicator: setIndicator, isLive: isLive };
})();
