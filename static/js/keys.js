/* Keyboard shortcuts of every page: "/" puts the cursor in the page's search field, "?" shows the keys
 * the page knows, Escape leaves a field or closes the help. Pages add their own with
 * StreamForgeKeys.bind({ key: handler }, { key: "what it does" }). Keys typed into a field, or with Ctrl,
 * Alt or Meta held, are left to the browser. */
"use strict";

(function () {
  const handlers = {};
  const help = [["/", "search"], ["?", "this help"]];

  function typing(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']");
  }

  function showHelp() {
    const dialog = document.getElementById("keys-help");
    if (!dialog) return;
    const list = dialog.querySelector("dl");
    list.textContent = "";
    help.forEach(function (entry) {
      const dt = document.createElement("dt");
      const kbd = document.createElement("kbd");
      kbd.textContent = entry[0];
      dt.appendChild(kbd);
      const dd = document.createElement("dd");
      dd.textContent = entry[1];
      list.appendChild(dt);
      list.appendChild(dd);
    });
    if (!dialog.open) dialog.showModal();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey) return;
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (document.querySelector("dialog[open]:not(#keys-help)")) return;  // a confirmation has the keys
    if (event.key === "/") {
      const search = document.querySelector("[data-shortcut-search], input[type=search]");
      if (search) { event.preventDefault(); search.focus(); search.select(); }
    } else if (event.key === "?") {
      event.preventDefault();
      showHelp();
    } else if (handlers[event.key]) {
      event.preventDefault();
      handlers[event.key](event);
    }
  });

  window.StreamForgeKeys = {
    /** Add a page's keys: ``actions`` maps a key (KeyboardEvent.key) to a handler, ``described`` maps the
     *  keys to what they do, for the "?" help. */
    bind: function (actions, described) {
      Object.assign(handlers, actions);
      Object.entries(described || {}).forEach(function (entry) { help.push(entry); });
    },
  };

  document.addEventListener("DOMContentLoaded", function () {
    const close = document.getElementById("keys-help-close");
    if (close) close.addEventListener("click", function () { document.getElementById("keys-help").close(); });
  });
})();
