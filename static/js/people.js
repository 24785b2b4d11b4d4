/* The people pages (/people/, /account/): every change is a fetch() to the REST API (/api/users/, /api/teams/,
 * /api/tokens/) with the session cookie and the page's CSRF token, through StreamForgeDlq's helpers (api,
 * errorText, flash, refresh), so the page meets the same rules and audit events as a script.
 *
 * Elements declare what they do; one delegated handler serves them (refreshed sections are swapped):
 *   data-api="<url>" data-method="POST|PATCH|DELETE"   where to send
 *   on a form: the form's fields as JSON (a checkbox as true/false); errors go to its [data-error]
 *   on a select or checkbox: data-field="<name>", sends {name: value} when it changes
 *   on a button: data-body='<json>'; data-confirm="<text>" asks first (data-title, data-submit, data-danger)
 *   data-refresh="id id ..."  sections to re-read afterwards; data-done  the note shown on success
 *   data-shows-key  the answer carries a new API token's key: shown once in #token-new, never stored
 *   data-hides-key  hide a shown key (the token was revoked)
 */
"use strict";

(function () {
  const sf = window.StreamForgeDlq;

  function refreshIds(el) {
    return (el.dataset.refresh || "").split(/\s+/).filter(Boolean);
  }

  function showKey(key) {
    const box = document.getElementById("token-new");
    if (!box) return;
    document.getElementById("token-key").textContent = key;
    box.hidden = false;
  }

  function hideKey() {
    const box = document.getElementById("token-new");
    if (!box) return;
    document.getElementById("token-key").textContent = "";
    box.hidden = true;
  }

  /** Send el's request; on success show its note, the key if any, and refresh its sections. */
  function send(el, body) {
    return sf.api(el.dataset.method || "POST", el.dataset.api, body).then(function (answer) {
      if (answer.ok) {
        if (el.dataset.showsKey !== undefined && answer.data && answer.data.key) showKey(answer.data.key);
        if (el.dataset.hidesKey !== undefined) hideKey();
        sf.flash(el.dataset.done || "Done.", "success");
        const ids = refreshIds(el);
        if (ids.length) sf.refresh(ids);
      }
      return answer;
    });
  }

  // ------------------------------------------------------------------------------------------ forms
  document.addEventListener("submit", function (event) {
    const form = event.target.closest("form[data-api]");
    if (!form) return;
    event.preventDefault();
    const body = {};
    Array.from(form.elements).forEach(function (field) {
      if (!field.name || field.name === "csrfmiddlewaretoken") return;
      if (field.type === "checkbox") body[field.name] = field.checked;
      else if (field.value !== "") body[field.name] = field.value;
    });
    const errorBox = form.querySelector("[data-error]");
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    send(form, body).then(function (answer) {
      if (button) button.disabled = false;
      if (answer.ok) {
        form.reset();
        if (errorBox) errorBox.hidden = true;
      } else if (errorBox) {
        errorBox.textContent = sf.errorText(answer);
        errorBox.hidden = false;
      } else {
        sf.flash(sf.errorText(answer), "error");
      }
    });
  });

  // ------------------------------------------------------------------------------------------ inline fields
  document.addEventListener("change", function (event) {
    const field = event.target.closest("select[data-api], input[data-api]");
    if (!field || !field.dataset.field) return;
    const body = {};
    body[field.dataset.field] = field.type === "checkbox" ? field.checked : field.value;
    field.disabled = true;
    send(field, body).then(function (answer) {
      field.disabled = false;
      if (!answer.ok) {
        sf.flash(sf.errorText(answer), "error");
        sf.refresh(refreshIds(field));  // show the value the server kept
      }
    });
  });

  // ------------------------------------------------------------------------------------------ buttons
  const dialog = document.getElementById("people-confirm");
  const errorBox = document.getElementById("people-confirm-error");
  const submit = document.getElementById("people-confirm-submit");
  let pending = null;

  function perform(button) {
    const body = button.dataset.body ? JSON.parse(button.dataset.body) : undefined;
    button.disabled = true;
    return send(button, body).then(function (answer) {
      button.disabled = false;
      return answer;
    });
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-api]");
    if (!button || button.disabled) return;
    if (!button.dataset.confirm || !dialog) {
      perform(button).then(function (answer) { if (!answer.ok) sf.flash(sf.errorText(answer), "error"); });
      return;
    }
    pending = button;
    document.getElementById("people-confirm-title").textContent = button.dataset.title || "Confirm";
    document.getElementById("people-confirm-text").textContent = button.dataset.confirm;
    errorBox.hidden = true;
    submit.textContent = button.dataset.submit || "Confirm";
    submit.className = button.dataset.danger ? "danger" : "";
    dialog.showModal();
  });

  if (dialog) {
    document.getElementById("people-confirm-cancel").addEventListener("click", function () { dialog.close(); });
    document.getElementById("people-confirm-form").addEventListener("submit", function (event) {
      event.preventDefault();
      if (!pending) return;
      submit.disabled = true;
      perform(pending).then(function (answer) {
        submit.disabled = false;
        if (answer.ok) {
          dialog.close();
          pending = null;
        } else {
          errorBox.textContent = sf.errorText(answer);
          errorBox.hidden = false;
        }
      });
    });
  }

  // ------------------------------------------------------------------------------------------ copy the key
  document.addEventListener("click", function (event) {
    if (!event.target.closest("#token-copy")) return;
    const key = document.getElementById("token-key");
    const copied = function () { sf.flash("Token copied to the clipboard.", "success"); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(key.textContent).then(copied, function () { selectKey(key); });
    } else {
      selectKey(key);
      if (document.execCommand && document.execCommand("copy")) copied();
    }
  });

  /** Select the key's text, so it can be copied by hand when the clipboard is not available. */
  function selectKey(key) {
    const range = document.createRange();
    range.selectNodeContents(key);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
})();
