/* The colour theme: "system" (the default: follows the operating system's prefers-color-scheme, also when it
 * changes while the page is open), "light" or "dark", chosen in the header and remembered in localStorage.
 * Loaded synchronously in <head>, before the stylesheets are applied to any content, so that
 * <html data-theme> is right before the first paint (no flash of the other theme); the CSP allows no inline
 * script, hence a file. Pages that draw in colours CSS cannot reach (Chart.js canvases) read the palette
 * with StreamForgeTheme.color("--name") and listen for the "streamforge:theme" event on document. */
"use strict";

window.StreamForgeTheme = (function () {
  const KEY = "streamforge-theme";
  const CHOICES = ["system", "light", "dark"];
  const root = document.documentElement;
  const systemLight = window.matchMedia("(prefers-color-scheme: light)");

  function stored() {
    try {
      const value = window.localStorage.getItem(KEY);
      return CHOICES.indexOf(value) >= 0 ? value : "system";
    } catch (e) {
      return "system";  // storage refused (privacy mode): follow the system
    }
  }

  let choice = stored();

  function resolved() {
    if (choice !== "system") return choice;
    return systemLight.matches ? "light" : "dark";
  }

  function apply() {
    const theme = resolved();
    root.dataset.themeChoice = choice;
    if (root.dataset.theme === theme) return;
    root.dataset.theme = theme;
    document.dispatchEvent(new CustomEvent("streamforge:theme", { detail: { theme: theme, choice: choice } }));
  }

  function choose(value) {
    if (CHOICES.indexOf(value) < 0) return;
    choice = value;
    try {
      if (value === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, value);
    } catch (e) { /* not remembered, still applied */ }
    apply();
  }

  /** color("--muted"): the value of a custom property of the theme now shown, e.g. "#59636e". */
  function color(name) {
    return getComputedStyle(root).getPropertyValue(name).trim();
  }

  apply();
  systemLight.addEventListener("change", apply);
  // Another tab changed the choice: follow it.
  window.addEventListener("storage", function (event) {
    if (event.key === KEY || event.key === null) { choice = stored(); apply(); sync(); }
  });

  // The header's selector (on every page of base.html), wired once the document is parsed.
  function sync() {
    const select = document.getElementById("theme-choice");
    if (select) select.value = choice;
  }
  document.addEventListener("DOMContentLoaded", function () {
    const select = document.getElementById("theme-choice");
    if (!select) return;
    sync();
    select.addEventListener("change", function () { choose(select.value); });
  });

  return { choose: choose, color: color, theme: resolved, choice: function () { return choice; } };
})();
