/* The DLQ console's shared browser code.
 *
 * Every mutation is a fetch() to the REST API under /api/dlq/ with the session cookie and the page's CSRF
 * token, so the page and a script go through the same serializer, service function, permission check and
 * audit event. After a change the page re-reads itself and swaps the named sections in place (refresh), so
 * what it shows is what the server rendered, without a reload and without a second template in JavaScript.
 *
 * Buttons declare what they do, and one delegated handler serves them (sections are swapped, so handlers
 * bound to elements would be lost):
 *   data-post="<api url>"          POST there (data-method="DELETE" for a delete)
 *   data-reason="required|optional|none"  ask for a reason in the confirmation dialog ("none": no dialog)
 *   data-reason-field="note"               send the dialog's text under that name instead of "reason"
 *   data-title, data-text, data-submit, data-danger   the dialog's wording
 *   data-refresh="id id ..."       sections to re-read afterwards
 *   data-idempotent="true"         send an Idempotency-Key (one per confirmation); data-summary="replay" says where it landed
 * Tabs: a [data-tabs] container with [data-tab=x] buttons and [data-panel=x] panels.
 */
"use strict";

window.StreamForgeDlq = (function () {
  const live = window.StreamForgeLive;

  /** fetch() JSON to the API; resolves to {ok, status, data} whatever the status (never throws on 4xx). */
  function api(method, url, body, headers) {
    const init = {
      method: method,
      credentials: "same-origin",
      headers: Object.assign({ "X-CSRFToken": live.csrfToken(), Accept: "application/json" }, headers || {}),
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(url, init).then(
      function (r) {
        return r.text().then(function (text) {
          let data = null;
          try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text.slice(0, 300) }; }
          return { ok: r.ok, status: r.status, data: data };
        });
      },
      function (e) { return { ok: false, status: 0, data: { detail: "the server did not answer (" + e.message + ")" } }; }
    );
  }

  /** A DRF error answer ({"detail": ...} or {"field": ["..."]}) as one sentence. */
  function errorText(answer) {
    const data = answer.data || {};
    if (answer.status === 403 && !data.detail) return "You are not allowed to do this.";
    if (typeof data.detail === "string") return data.detail;
    const parts = Object.keys(data).map(function (field) {
      const value = Array.isArray(data[field]) ? data[field].join(" ") : JSON.stringify(data[field]);
      return field === "non_field_errors" ? value : field + ": " + value;
    });
    return parts.join("; ") || "The request failed (HTTP " + answer.status + ").";
  }

  /** A UUID v4 for idempotency keys (crypto.randomUUID needs a secure context; plain-http LANs are not). */
  function uuid4() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, function (x) { return x.toString(16).padStart(2, "0"); }).join("");
    return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
  }

  /** A short note at the top of the page: kind is "success" or "error". */
  function flash(text, kind) {
    let list = document.getElementById("dlq-flash");
    if (!list) {
      list = document.createElement("ul");
      list.id = "dlq-flash";
      list.className = "flash";
      list.dataset.testid = "flash";
      list.setAttribute("role", "status");
      document.querySelector("main").prepend(list);
    }
    list.textContent = "";
    const item = document.createElement("li");
    item.className = kind || "success";
    item.textContent = text;
    list.appendChild(item);
  }

  let refreshing = null;
  /** Re-read this page and swap the elements with these ids for the server's fresh rendering (an element
   * the server no longer renders, e.g. the fix editor of a replayed message, is removed). */
  function refresh(ids) {
    const run = function () {
      return fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          const fresh = new DOMParser().parseFromString(html, "text/html");
          ids.forEach(function (id) {
            const old = document.getElementById(id);
            const now = fresh.getElementById(id);
            if (old && now) old.replaceWith(document.importNode(now, true));
            else if (old && !now) old.remove();
          });
          document.dispatchEvent(new CustomEvent("dlq:refreshed", { detail: { ids: ids } }));
        })
        .catch(function (e) { console.warn("refresh failed", e); });
    };
    // One refresh at a time, in order: a burst of live updates must not interleave swaps.
    refreshing = (refreshing || Promise.resolve()).then(run);
    return refreshing;
  }

  // ---------------------------------------------------------------------------------------- confirm dialog
  const dialog = document.getElementById("confirm-dialog");
  let pending = null;  // the button whose action the dialog confirms

  function perform(button, reason) {
    const method = button.dataset.method || "POST";
    // data-body: more JSON fields to send with the reason (a forced replay sends {"force": true})
    const extra = button.dataset.body ? JSON.parse(button.dataset.body) : {};
    // data-reason-field: the body's name for the dialog's text (a claim sends it as its "note")
    const text = {};
    text[button.dataset.reasonField || "reason"] = reason;
    const body = method === "DELETE" ? undefined : Object.assign(text, extra);
    // data-idempotent: one Idempotency-Key per confirmed action, so a retried or doubled request acts once
    const headers = {};
    if (button.dataset.idempotent) {
      button.dataset.idempotencyKey = button.dataset.idempotencyKey || uuid4();
      headers["Idempotency-Key"] = button.dataset.idempotencyKey;
    }
    button.disabled = true;
    return api(method, button.dataset.post, body, headers).then(function (answer) {
      button.disabled = false;
      if (answer.status) delete button.dataset.idempotencyKey;  // answered: a new confirmation is a new action
      if (answer.ok && button.dataset.summary === "replay") {
        flash("Replayed to " + answer.data.target_topic + " (partition " + answer.data.partition + ", offset " +
              answer.data.offset + ").", "success");
        refresh((button.dataset.refresh || "").split(/\s+/).filter(Boolean));
      } else if (answer.ok && Array.isArray(answer.data) && button.dataset.summary === "replays") {
        // one result per message (replay-with-siblings): say which were replayed and why others were not
        const done = answer.data.filter(function (r) { return r.replay_id !== null; });
        const left = answer.data.filter(function (r) { return r.replay_id === null; });
        flash("Replayed " + (done.map(function (r) { return "#" + r.id + " (" + r.destination + ")"; }).join(", ") || "none") +
              (left.length ? "; not replayed: " + left.map(function (r) { return "#" + r.id + ": " + r.error; }).join("; ") : "") + ".",
              left.length ? "error" : "success");
        const ids = (button.dataset.refresh || "").split(/\s+/).filter(Boolean);
        if (ids.length) refresh(ids);
      } else if (answer.ok) {
        flash(button.dataset.done || (button.dataset.submit || button.textContent.replace("…", "")).trim() + ": done.", "success");
        const ids = (button.dataset.refresh || "").split(/\s+/).filter(Boolean);
        if (ids.length) refresh(ids);
      }
      return answer;
    });
  }

  if (dialog) {
    const reasonInput = document.getElementById("confirm-reason");
    const errorBox = document.getElementById("confirm-error");
    const submit = document.getElementById("confirm-submit");

    function showError(text) { errorBox.textContent = text; errorBox.hidden = !text; }

    document.getElementById("confirm-cancel").addEventListener("click", function () { dialog.close(); });
    document.getElementById("confirm-form").addEventListener("submit", function (event) {
      event.preventDefault();
      if (!pending) return;
      const reason = reasonInput.value.trim();
      if (pending.dataset.reason === "required" && !reason) {
        // Refused here so nothing is sent; the API refuses an empty reason too.
        showError("A reason is required: say why, it is kept in the audit log.");
        reasonInput.focus();
        return;
      }
      submit.disabled = true;
      perform(pending, reason).then(function (answer) {
        submit.disabled = false;
        if (answer.ok) { dialog.close(); pending = null; } else { showError(errorText(answer)); }
      });
    });

    document.addEventListener("click", function (event) {
      const button = event.target.closest("[data-post]");
      if (!button || button.disabled) return;
      if (button.dataset.reason === "none") {
        perform(button, "").then(function (answer) { if (!answer.ok) flash(errorText(answer), "error"); });
        return;
      }
      pending = button;
      document.getElementById("confirm-title").textContent = button.dataset.title || "Confirm";
      document.getElementById("confirm-text").textContent = button.dataset.text || "";
      document.getElementById("confirm-reason-note").textContent =
        button.dataset.reason === "required" ? "(required, kept in the audit log)" : "(optional, kept in the audit log)";
      reasonInput.value = "";
      showError("");
      submit.textContent = button.dataset.submit || "Confirm";
      submit.className = button.dataset.danger ? "danger" : "";
      dialog.showModal();
      reasonInput.focus();
    });
  }

  // ---------------------------------------------------------------------------------------- tabs
  document.addEventListener("click", function (event) {
    const tab = event.target.closest("[data-tab]");
    if (!tab) return;
    const box = tab.closest("[data-tabs]");
    box.querySelectorAll("[data-tab]").forEach(function (t) { t.classList.toggle("active", t === tab); });
    box.querySelectorAll("[data-panel]").forEach(function (p) { p.hidden = p.dataset.panel !== tab.dataset.tab; });
  });

  /** Open /ws/dlq/ (live.js reconnects it) and call onMessage for each update. */
  function connect(onMessage, onReconnect) {
    return live.connect("/ws/dlq/", { onMessage: onMessage, onReconnect: onReconnect });
  }

  return { api: api, errorText: errorText, uuid4: uuid4, flash: flash, refresh: refresh, connect: connect };
})();
