// The import page: "Check" posts the chosen file to /api/dlq/import/ as a dry run and shows its counts or the
// file's bad lines; only a clean check of the same file and pipeline enables "Import", which posts it again
// for real. The file input keeps the file between the two, so nothing is uploaded anywhere else.
(function () {
  "use strict";
  const card = document.getElementById("dlq-import");
  const form = card && card.querySelector("[data-testid=import-form]");
  if (!form) return;
  const outcome = card.querySelector("[data-testid=import-outcome]");
  const confirm = form.querySelector("[data-import-step=import]");
  const check = form.querySelector("[data-import-step=check]");
  let checked = null; // the file and pipeline the last clean dry run was for

  function csrf() { return form.querySelector("input[name=csrfmiddlewaretoken]").value; }

  function chosen() {
    const input = form.querySelector("input[name=file]");
    return { file: input.files && input.files[0], pipeline: form.querySelector("select[name=pipeline]").value };
  }

  function show(kind, title, lines) {
    outcome.hidden = false;
    outcome.className = kind === "error" ? "warning-box" : "";
    outcome.replaceChildren();
    const head = document.createElement("p");
    head.textContent = title;
    head.setAttribute("data-testid", "import-" + kind);
    outcome.appendChild(head);
    if (lines.length) {
      const list = document.createElement("ul");
      lines.forEach(function (text) {
        const item = document.createElement("li");
        item.textContent = text;
        list.appendChild(item);
      });
      outcome.appendChild(list);
    }
  }

  function counts(result) {
    const lines = [];
    Object.keys(result.destinations).forEach(function (d) { lines.push("destination " + d + ": " + result.destinations[d]); });
    Object.keys(result.error_types).forEach(function (t) { lines.push(t + ": " + result.error_types[t]); });
    if (result.already_imported) lines.push(result.already_imported + " already imported (left as they are)");
    if (result.masked) lines.push(result.masked + " came masked and stay masked");
    return lines;
  }

  function errors(answer) {
    const data = answer.data || {};
    if (answer.status === 403) return [data.detail || "You are not allowed to import into this pipeline."];
    if (typeof data.detail === "string") return [data.detail];
    const lines = [];
    Object.keys(data).forEach(function (field) {
      (Array.isArray(data[field]) ? data[field] : [String(data[field])]).forEach(function (text) { lines.push(field + ": " + text); });
    });
    return lines.length ? lines : ["The request failed (HTTP " + answer.status + ")."];
  }

  function post(dryRun) {
    const pick = chosen();
    if (!pick.file) { show("error", "Choose an export file first.", []); return Promise.resolve(null); }
    const body = new FormData();
    body.append("file", pick.file);
    body.append("pipeline", pick.pipeline);
    body.append("dry_run", dryRun ? "true" : "false");
    check.disabled = confirm.disabled = true;
    return fetch(card.dataset.api, {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "X-CSRFToken": csrf(), Accept: "application/json" },
    }).then(function (r) {
      return r.text().then(function (text) {
        let data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text.slice(0, 300) }; }
        return { ok: r.ok, status: r.status, data: data, pick: pick };
      });
    }, function (e) {
      return { ok: false, status: 0, data: { detail: "the server did not answer (" + e.message + ")" }, pick: pick };
    }).finally(function () { check.disabled = false; });
  }

  check.addEventListener("click", function () {
    checked = null;
    post(true).then(function (answer) {
      if (!answer) return;
      if (!answer.ok) { show("error", "Nothing would be imported:", errors(answer)); return; }
      const r = answer.data;
      const fresh = r.rows - r.already_imported;
      show("preview", r.rows + " dead letters in the file; " + fresh + " would be imported into " + r.pipeline + " (team " + r.team + ") as parked.", counts(r));
      checked = answer.pick;
      confirm.disabled = fresh === 0;
      confirm.textContent = "Import " + fresh + " dead letter" + (fresh === 1 ? "" : "s");
    });
  });

  confirm.addEventListener("click", function () {
    const pick = chosen();
    if (!checked || pick.file !== checked.file || pick.pipeline !== checked.pipeline) {
      confirm.disabled = true;
      show("error", "The file or pipeline changed since the check: check again first.", []);
      return;
    }
    post(false).then(function (answer) {
      checked = null;
      if (!answer) return;
      if (!answer.ok) { show("error", "Nothing was imported:", errors(answer)); return; }
      const r = answer.data;
      show("done", "Imported " + r.created + " dead letters into " + r.pipeline + "; they are parked.", counts(r));
      const link = document.createElement("a");
      link.href = card.dataset.listUrl + "?pipeline=" + encodeURIComponent(r.pipeline) + "&status=parked";
      link.textContent = "See them on the DLQ list";
      link.setAttribute("data-testid", "import-list-link");
      outcome.appendChild(link);
    });
  });

  form.addEventListener("submit", function (event) { event.preventDefault(); });
  form.addEventListener("change", function () { checked = null; confirm.disabled = true; confirm.textContent = "Import"; });
})();
