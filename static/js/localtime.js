/* Times in UTC (the default) or in the browser's own time zone, chosen in the header and remembered in
 * localStorage, like the colour theme (theme.js).
 *
 * The server prints every time in UTC inside <time datetime="...Z" data-format="Y-m-d H:i:s"> (the
 * `utc_time` template filter); in local mode this module rewrites their text in the local zone with its offset
 * ("2024-05-01 19:35:12 +05:30"), and in UTC mode puts the server's text back. Elements added later (sections
 * a live update swapped in) are rewritten as they arrive. Labels: <html data-time-zone="utc|local"> lets CSS
 * hide a trailing " UTC" (.tz-utc), and .tz-name elements (column headings) say "UTC" or "local".
 *
 * Scripts that print times themselves use StreamForgeTime.format(ms, "H:i:s") (in the chosen zone, no zone
 * suffix), .zone(ms) ("UTC" or "+05:30"), .offsetMs(ms) and listen for "streamforge:time" on document.
 * Loaded synchronously in <head>, so the labels are right before the first paint. */
"use strict";

window.StreamForgeTime = (function () {
  const KEY = "streamforge-time-zone";
  const MODES = ["utc", "local"];
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const root = document.documentElement;
  const serverText = new WeakMap();  // <time> -> the UTC text the server rendered

  function stored() {
    try {
      return window.localStorage.getItem(KEY) === "local" ? "local" : "utc";
    } catch (e) {
      return "utc";  // storage refused (privacy mode)
    }
  }

  let mode = stored();

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  /** The minutes east of UTC that are shown for this moment: 0 in UTC mode. */
  function offsetMinutes(date) {
    return mode === "local" ? -date.getTimezoneOffset() : 0;
  }

  /** format(value, "Y-m-d H:i:s"): a moment (ms, Date or ISO text) in the chosen zone, in the subset of
   * Django's date format the templates use (Y m d j M H i s); other characters are copied. */
  function format(value, pattern) {
    const date = value instanceof Date ? value : new Date(value);
    const shifted = new Date(date.getTime() + offsetMinutes(date) * 60000);  // read with getUTC*
    const parts = {
      Y: String(shifted.getUTCFullYear()), m: pad(shifted.getUTCMonth() + 1), d: pad(shifted.getUTCDate()),
      j: String(shifted.getUTCDate()), M: MONTHS[shifted.getUTCMonth()], H: pad(shifted.getUTCHours()),
      i: pad(shifted.getUTCMinutes()), s: pad(shifted.getUTCSeconds()),
    };
    let out = "";
    for (const c of pattern || "Y-m-d H:i:s") out += Object.prototype.hasOwnProperty.call(parts, c) ? parts[c] : c;
    return out;
  }

  /** "UTC", or the local offset at that moment ("+05:30", "-04:00"; daylight saving time changes it). */
  function zone(value) {
    if (mode === "utc") return "UTC";
    const date = value instanceof Date ? value : new Date(value === undefined ? Date.now() : value);
    return offsetText(offsetMinutes(date));
  }

  function offsetText(minutes) {
    const abs = Math.abs(minutes);
    return (minutes < 0 ? "-" : "+") + pad(Math.floor(abs / 60)) + ":" + pad(abs % 60);
  }

  /** stamp(value, pattern): format(...) followed by the zone, e.g. "14:05:12 +01:00" or "14:05:12 UTC". */
  function stamp(value, pattern) {
    return format(value, pattern) + " " + zone(value);
  }

  function offsetMs(value) {
    return offsetMinutes(value instanceof Date ? value : new Date(value)) * 60000;
  }

  function rewrite(time) {
    const moment = Date.parse(time.getAttribute("datetime"));
    if (Number.isNaN(moment)) return;
    if (!serverText.has(time)) serverText.set(time, time.textContent);
    const text = mode === "local" ? stamp(moment, time.dataset.format) : serverText.get(time);
    if (time.textContent !== text) time.textContent = text;
    time.title = mode === "local" ? serverText.get(time) + " UTC" : "";
  }

  /** Rewrite the times and labels in ``scope`` (the document by default) for the chosen mode. */
  function apply(scope) {
    const within = scope || document;
    within.querySelectorAll("time[datetime][data-format]").forEach(rewrite);
    within.querySelectorAll(".tz-name").forEach(function (label) { label.textContent = mode === "local" ? "local" : "UTC"; });
  }

  function choose(value) {
    if (MODES.indexOf(value) < 0) return;
    mode = value;
    try {
      if (value === "utc") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, value);
    } catch (e) { /* not remembered, still applied */ }
    root.dataset.timeZone = mode;
    sync();
    apply();
    document.dispatchEvent(new CustomEvent("streamforge:time", { detail: { mode: mode } }));
  }

  function sync() {
    const select = document.getElementById("time-zone-choice");
    if (!select) return;
    select.value = mode;
    const local = select.querySelector('option[value="local"]');
    if (local) local.textContent = "local (UTC" + offsetText(-new Date().getTimezoneOffset()) + ")";
  }

  root.dataset.timeZone = mode;
  window.addEventListener("storage", function (event) {
    if ((event.key === KEY || event.key === null) && stored() !== mode) choose(stored());
  });

  document.addEventListener("DOMContentLoaded", function () {
    const select = document.getElementById("time-zone-choice");
    if (select) {
      sync();
      select.addEventListener("change", function () { choose(select.value); });
    }
    if (mode === "local") apply();
    // Sections swapped in later (live refreshes) come with the server's UTC text: rewrite those too.
    new MutationObserver(function (records) {
      if (mode !== "local") return;
      records.forEach(function (record) {
        record.addedNodes.forEach(function (node) {
          if (node.nodeType !== Node.ELEMENT_NODE) return;
          if (node.matches("time[datetime][data-format]")) rewrite(node);
          else apply(node);
        });
      });
    }).observe(document.body, { childList: true, subtree: true });
  });

  return { format: format, zone: zone, stamp: stamp, offsetMs: offsetMs, mode: function () { return mode; }, choose: choose, apply: apply };
})();
