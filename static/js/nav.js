/* The header on a narrow screen (a phone): the navigation, the person's roles and "Log out" fold behind the
 * "Menu" button (narrow.css hides them unless the header has .nav-open); the button says whether they are
 * shown (aria-expanded). Escape closes them again. On a wide screen the button is hidden and nothing folds.
 *
 * Also the DLQ list's filters: on a narrow screen they start folded (their <details> closed) and their
 * summary says how many are set, so the dead letters come first. */
"use strict";

(function () {
  const toggle = document.getElementById("nav-toggle");
  const header = document.querySelector(".topbar");
  if (toggle && header) {
    const show = function (open) {
      header.classList.toggle("nav-open", open);
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      toggle.textContent = open ? "Close menu" : "Menu";
    };
    toggle.addEventListener("click", function () { show(!header.classList.contains("nav-open")); });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && header.classList.contains("nav-open")) { show(false); toggle.focus(); }
    });
  }

  const fold = document.getElementById("filters-fold");
  if (fold) {
    const set = Array.from(fold.querySelectorAll("[data-filter], input[name=q]"))
      .filter(function (field) { return field.value && field.value.trim() !== ""; }).length;
    const count = fold.querySelector("[data-filter-count]");
    if (count) count.textContent = set ? " · " + set + " set" : "";
    if (window.matchMedia("(max-width: 720px)").matches) fold.open = false;
  }
})();
