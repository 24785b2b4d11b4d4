/* The topic page's search and live tail (templates/pipelines/topic.html).
 *
 * Search: the form's fields go to <topic>/search/ (dlq.topic_views.topic_search_rows), which answers one
 * bounded step (a couple of seconds at most) as compact rows, with its progress in data-* attributes; the
 * script appends the matches, adds up scanned and matched, shows the range covered, and asks for the next
 * step with the cursor until the range is done or the person presses Stop (Continue goes on from there).
 * A refusal (400) names the field and the reason, a DSL expression's with its position.
 *
 * Live tail: <topic>/tail/ gives the position "now", then every TAIL_EVERY_MS the records written since;
 * they are put at the top, newest first, and only the newest data-tail-kept rows are kept. Pause stops
 * polling; Resume goes on from the position, so nothing written meanwhile is skipped.
 *
 * Rows are HTML the server rendered (masked for viewers as the rest of the browser); times in them are
 * <time> elements that localtime.js rewrites for the UTC/local choice; "dlq:refreshed" lets
 * payload_viewer.js set up the JSON trees of the new rows. */
"use strict";

(function () {
  const TAIL_EVERY_MS = 1500;
  const box = document.querySelector("[data-testid=topic-search]");
  if (!box) return;
  const form = box.querySelector("[data-testid=search-form]");
  const results = box.querySelector("[data-testid=search-results]");
  const progress = box.querySelector("[data-testid=search-progress]");
  const errorLine = box.querySelector("[data-testid=search-error]");
  const stopButton = box.querySelector("[data-testid=search-stop]");
  const continueButton = box.querySelector("[data-testid=search-continue]");
  const runButton = box.querySelector("[data-testid=search-run]");
  const tailButton = box.querySelector("[data-testid=tail-toggle]");
  const tailStatus = box.querySelector("[data-testid=tail-status]");
  const tailRows = box.querySelector("[data-testid=tail-records]");
  const kept = parseInt(box.dataset.tailKept, 10) || 200;

  /** GET a fragment; resolves to {ok, status, step: the wrapper element or the refusal}. */
  function fragment(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (response) {
      return response.text().then(function (html) {
        const holder = document.createElement("template");
        holder.innerHTML = html;  // the server's own rendering; CSP keeps any script in it from running
        return { ok: response.ok, status: response.status, step: holder.content.firstElementChild };
      });
    });
  }

  function rowsOf(step) {
    return Array.prototype.slice.call(step.querySelectorAll(":scope > [data-testid=record]"));
  }

  function newRows() {
    document.dispatchEvent(new CustomEvent("dlq:refreshed"));
  }

  // ------------------------------------------------------------------------------------ search
  const search = { params: null, cursor: "", scanned: 0, matched: 0, running: false, stopped: false };

  function showError(text) {
    errorLine.textContent = text;
    errorLine.hidden = !text;
  }

  function showProgress(ranges, state) {
    progress.hidden = false;
    progress.textContent = "";
    const line = document.createElement("div");
    line.dataset.testid = "search-counts";
    line.textContent = "Scanned " + search.scanned + " records, " + search.matched + " matched · " + state;
    progress.appendChild(line);
    if (ranges) {
      ranges.hidden = false;
      ranges.classList.add("muted");
      ranges.dataset.testid = "search-ranges";
      progress.appendChild(ranges);
    }
  }

  function buttons() {
    runButton.disabled = search.running;
    stopButton.hidden = !search.running;
    continueButton.hidden = search.running || !search.cursor;
  }

  function step() {
    const params = new URLSearchParams(search.params);
    if (search.cursor) params.set("cursor", search.cursor);
    search.running = true;
    buttons();
    fragment(box.dataset.searchUrl + "?" + params.toString()).then(function (answer) {
      if (!answer.ok || !answer.step || answer.step.dataset.testid !== "rows-step") {
        search.running = false;
        search.cursor = "";
        buttons();
        const field = answer.step && answer.step.dataset.errorField;
        showError((field ? field + ": " : "") + (answer.step ? answer.step.textContent : "the search failed (" + answer.status + ")"));
        progress.hidden = true;
        return;
      }
      const s = answer.step;
      rowsOf(s).forEach(function (row) { results.appendChild(row); });
      newRows();
      search.scanned += parseInt(s.dataset.scanned, 10);
      search.matched += parseInt(s.dataset.matched, 10);
      search.cursor = s.dataset.nextCursor || "";
      const done = s.dataset.done === "true";
      const more = !done && !search.stopped;
      showProgress(s.querySelector("[data-ranges]"), done ? "done: the whole range was searched" : (search.stopped ? "stopped; Continue goes on from here" : "searching…"));
      if (more) {
        step();
      } else {
        search.running = false;
        buttons();
      }
    }).catch(function () {
      search.running = false;
      buttons();
      showError("the search could not reach the server; Continue tries again");
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const params = new URLSearchParams(new FormData(form));
    Array.from(params.keys()).forEach(function (name) { if (!params.get(name)) params.delete(name); });
    search.params = params.toString();
    search.cursor = "";
    search.scanned = 0;
    search.matched = 0;
    search.stopped = false;
    results.textContent = "";
    showError("");
    showProgress(null, "searching…");
    step();
  });

  stopButton.addEventListener("click", function () { search.stopped = true; });
  continueButton.addEventListener("click", function () {
    if (!search.cursor) return;
    search.stopped = false;
    showError("");
    step();
  });

  // ------------------------------------------------------------------------------------ live tail
  const tail = { on: false, position: null, timer: 0, count: 0 };

  function tailLabel() {
    tailButton.textContent = tail.on ? "Pause" : (tail.position === null ? "Live tail" : "Resume");
    tailButton.setAttribute("aria-pressed", tail.on ? "true" : "false");
  }

  function poll() {
    tail.timer = 0;
    const params = new URLSearchParams();
    if (tail.position !== null) params.set("after", tail.position);
    const partition = form.elements.partition.value.trim();
    if (partition) params.set("partition", partition);
    fragment(box.dataset.tailUrl + "?" + params.toString()).then(function (answer) {
      if (!answer.ok || !answer.step || answer.step.dataset.testid !== "rows-step") {
        tail.on = false;
        tailLabel();
        tailStatus.textContent = "The tail stopped: " + (answer.step ? answer.step.textContent : "error " + answer.status);
        return;
      }
      tail.position = answer.step.dataset.position || "";
      rowsOf(answer.step).forEach(function (row) {
        tailRows.insertBefore(row, tailRows.firstChild);  // oldest first in the answer: newest ends on top
        tail.count += 1;
      });
      while (tailRows.children.length > kept) tailRows.removeChild(tailRows.lastElementChild);
      newRows();
      if (!tail.on) return;
      tailStatus.textContent = "Live: " + tail.count + " new record" + (tail.count === 1 ? "" : "s") + " since the tail started, last checked " + window.StreamForgeTime.stamp(Date.now(), "H:i:s") + ".";
      tail.timer = window.setTimeout(poll, TAIL_EVERY_MS);
    }).catch(function () {
      if (tail.on) {
        tailStatus.textContent = "The server did not answer; trying again…";
        tail.timer = window.setTimeout(poll, TAIL_EVERY_MS * 2);
      }
    });
  }

  tailButton.addEventListener("click", function () {
    tail.on = !tail.on;
    tailLabel();
    if (tail.on) {
      tailStatus.textContent = "Live: waiting for new records…";
      poll();
    } else {
      if (tail.timer) window.clearTimeout(tail.timer);
      tail.timer = 0;
      tailStatus.textContent = "Paused after " + tail.count + " new record" + (tail.count === 1 ? "" : "s") + "; Resume shows what arrived meanwhile.";
    }
  });
  tailLabel();
})();
