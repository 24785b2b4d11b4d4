/* The pipeline editor: DSL inputs validated as you type (debounced POST to /api/dsl/validate/, the error
 * shown with a caret at its position), destinations added and removed (inputs renumbered so their names
 * stay dotted spec paths without holes), and the dry-run panel: the whole form (the DRAFT) with the sample
 * messages goes to the page's dry-run-request endpoint, which answers with the draft spec and the messages
 * (or the form's errors by field); those go to the REST dry run (POST /api/dsl/dry-run/, the one dry run
 * the API and the editor share), and each message's outcome per destination is shown. */
"use strict";

(function () {
  const form = document.getElementById("editor");
  const csrf = window.StreamForgeLive.csrfToken();
  const DEBOUNCE_MS = 300;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ------------------------------------------------------------------------------------- DSL validation
  function validate(kind, expr) {
    return fetch(form.dataset.validateUrl, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify({ kind: kind, expr: expr }),
    }).then(function (r) { return r.json(); });
  }

  // The expression with the character at `position` marked (a caret after the end when it is missing).
  function pointAt(expr, position) {
    const code = el("code", "dsl-pointer");
    code.appendChild(document.createTextNode(expr.slice(0, position)));
    code.appendChild(el("mark", "", expr.charAt(position) || " "));
    code.appendChild(document.createTextNode(expr.slice(position + 1)));
    return code;
  }

  function showResult(status, result, expr, prefix) {
    status.textContent = "";
    status.className = "dsl-status";
    if (result.ok) {
      status.classList.add("ok");
      status.textContent = (prefix || "") + "✓ parses";
      return;
    }
    status.classList.add("bad");
    status.dataset.position = result.position;
    status.appendChild(el("div", "", (prefix || "") + result.error_type + " at " + result.position + ": " + result.message));
    status.appendChild(pointAt(expr, result.position));
  }

  function watchDsl(input) {
    const status = input.closest(".field").querySelector("[data-dsl-status]");
    let timer = null;
    let sequence = 0;
    input.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () {
        const mine = ++sequence;  // a slow answer to an older keystroke must not overwrite a newer one
        const expr = input.value.trim();
        if (!expr) { status.textContent = ""; status.className = "dsl-status"; return; }
        validate(input.dataset.dsl, expr).then(function (result) {
          if (mine === sequence) showResult(status, result, expr);
        }).catch(function () { /* the save validates again */ });
      }, DEBOUNCE_MS);
    });
  }

  function watchPairs(textarea) {
    const status = textarea.closest(".field").querySelector("[data-dsl-status]");
    let timer = null;
    let sequence = 0;
    textarea.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () {
        const mine = ++sequence;
        const lines = textarea.value.split("\n").map(function (line, i) { return { n: i + 1, line: line.trim() }; })
          .filter(function (l) { return l.line; });
        const checks = lines.map(function (l) {
          const cut = l.line.indexOf(": ");
          if (cut < 0) return Promise.resolve(null);
          const expr = l.line.slice(cut + 2).trim();
          return validate(textarea.dataset.pairsDsl, expr).then(function (r) { return { n: l.n, expr: expr, r: r }; });
        });
        Promise.all(checks).then(function (results) {
          if (mine !== sequence) return;
          const bad = results.find(function (x) { return x && !x.r.ok; });
          if (bad) showResult(status, bad.r, bad.expr, "line " + bad.n + ": ");
          else if (results.length) showResult(status, { ok: true }, "");
          else { status.textContent = ""; status.className = "dsl-status"; }
        }).catch(function () {});
      }, DEBOUNCE_MS);
    });
  }

  function watchAll(root) {
    root.querySelectorAll("[data-dsl]").forEach(watchDsl);
    root.querySelectorAll("[data-pairs-dsl]").forEach(watchPairs);
  }
  watchAll(form);

  // ------------------------------------------------------------------------------------- destinations
  const list = document.getElementById("destinations");
  function renumber() {
    list.querySelectorAll("[data-destination]").forEach(function (fieldset, index) {
      fieldset.querySelector("[data-destination-number]").textContent = index + 1;
      fieldset.querySelectorAll("[name^='destinations.']").forEach(function (input) {
        input.name = input.name.replace(/^destinations\.[^.]+\./, "destinations." + index + ".");
        input.id = "id-" + input.name;
      });
      fieldset.querySelectorAll("label[for^='id-destinations.']").forEach(function (label) {
        label.htmlFor = label.htmlFor.replace(/^id-destinations\.[^.]+\./, "id-destinations." + index + ".");
      });
      fieldset.querySelectorAll("[data-field-name]").forEach(function (div) {
        div.dataset.fieldName = div.dataset.fieldName.replace(/^destinations\.[^.]+\./, "destinations." + index + ".");
      });
    });
  }
  list.addEventListener("click", function (event) {
    const button = event.target.closest("[data-remove-destination]");
    if (!button) return;
    if (list.querySelectorAll("[data-destination]").length === 1) return;  // a pipeline needs one
    button.closest("[data-destination]").remove();
    renumber();
  });
  const addButton = document.getElementById("add-destination");
  if (addButton) {
    addButton.addEventListener("click", function () {
      const fragment = document.getElementById("destination-template").content.cloneNode(true);
      const fieldset = fragment.querySelector("[data-destination]");
      list.appendChild(fragment);
      renumber();
      watchAll(fieldset);
      fieldset.querySelector("input").focus();
    });
  }

  // ------------------------------------------------------------------------------------- dry run
  const output = document.getElementById("dry-run-output");
  const messages = document.getElementById("dry-run-messages");

  function showErrors(errors) {
    output.textContent = "";
    const ul = el("ul", "errors");
    Object.keys(errors).forEach(function (path) {
      errors[path].forEach(function (message) {
        const li = el("li");
        li.appendChild(el("code", "", path));
        li.appendChild(document.createTextNode(": " + message));
        ul.appendChild(li);
      });
    });
    output.appendChild(ul);
  }

  function showResults(results) {
    output.textContent = "";
    const table = el("table", "dry-run-results");
    const head = el("tr");
    ["#", "destination", "outcome", "output / error"].forEach(function (h) { head.appendChild(el("th", "", h)); });
    table.appendChild(el("thead")).appendChild(head);
    const body = el("tbody");
    results.forEach(function (message) {
      message.destinations.forEach(function (d, i) {
        const tr = el("tr", "outcome-" + d.outcome);
        tr.dataset.outcome = d.outcome;
        tr.appendChild(el("td", "", i === 0 ? String(message.index + 1) : ""));
        const where = el("td", "", d.destination);
        where.title = "topic " + d.topic;
        tr.appendChild(where);
        tr.appendChild(el("td", "nowrap", d.outcome.replace("_", "-")));
        const detail = el("td", "mono small");
        if (d.outcome === "produced") {
          detail.textContent = (d.key !== null ? "key " + d.key + " · " : "") + d.value;
        } else if (d.outcome === "dead_lettered") {
          detail.textContent = d.error_type + ": " + d.error_message;
        } else {
          detail.textContent = "filter did not match";
        }
        tr.appendChild(detail);
        body.appendChild(tr);
      });
    });
    table.appendChild(body);
    output.appendChild(table);
  }

  function post(url) {
    const data = new FormData(form);
    return fetch(url, { method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrf }, body: data })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); });
  }

  // The REST API's errors by field ({"spec.destinations.0.filter": [...]}, nested lists and objects from
  // its serializers) as the editor shows them: a flat path per message, spec paths without "spec.".
  function restErrors(body, prefix, into) {
    if (Array.isArray(body) && body.every(function (m) { return typeof m === "string"; })) {
      into[prefix || "request"] = body;
    } else if (body && typeof body === "object") {
      Object.keys(body).forEach(function (key) {
        const path = prefix ? prefix + "." + key : key;
        restErrors(body[key], path.replace(/^spec\./, ""), into);
      });
    } else {
      into[prefix || "request"] = [String(body)];
    }
    return into;
  }

  function dryRun(request) {
    return fetch(form.dataset.dryRunUrl, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(request),
    }).then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); });
  }

  document.getElementById("dry-run-button").addEventListener("click", function () {
    output.textContent = "Running…";
    post(form.dataset.dryRunRequestUrl).then(function (answer) {
      if (!answer.ok) { showErrors(answer.body.errors || { request: ["failed"] }); return null; }
      return dryRun(answer.body).then(function (run) {
        if (run.ok) showResults(run.body.results); else showErrors(restErrors(run.body, "", {}));
      });
    }).catch(function (e) { showErrors({ request: [String(e)] }); });
  });

  const sampleButton = document.getElementById("sample-button");
  if (sampleButton) {
    sampleButton.addEventListener("click", function () {
      output.textContent = "Reading the newest records of the source topics…";
      post(form.dataset.sampleUrl).then(function (answer) {
        if (!answer.ok) { showErrors(answer.body.errors || { request: ["failed"] }); return; }
        messages.value = JSON.stringify(answer.body.messages, null, 1);
        output.textContent = answer.body.messages.length + " records sampled; press Run.";
      }).catch(function (e) { showErrors({ request: [String(e)] }); });
    });
  }
})();
