// The Kafka cluster form's "Test connection": the typed settings are posted in the background (the server
// tries them once, bounded to a few seconds: pipelines.clusters.try_settings) while the page says so and
// counts the seconds; then the answer and the form as the server returns them replace the card, what was
// typed still in it. Without JavaScript the same button posts the form and the page comes back with it.
(function () {
  "use strict";

  function bind() {
    const page = document.querySelector("[data-cluster-page]");
    const form = page && page.querySelector("form[data-cluster-form]");
    const button = page && page.querySelector('[data-testid="cluster-try-button"]');
    const progress = page && page.querySelector('[data-testid="cluster-try-progress"]');
    if (!form || !button || !progress) return;
    const elapsed = progress.querySelector("[data-try-elapsed]");
    let waiting = false;

    form.addEventListener("submit", async (event) => {
      if (event.submitter !== button) return;
      event.preventDefault();
      if (waiting) return;
      waiting = true;
      const started = Date.now();
      progress.hidden = false;
      button.setAttribute("aria-disabled", "true");
      button.textContent = "Testing…";
      const ticker = window.setInterval(() => {
        if (elapsed) elapsed.textContent = String(Math.floor((Date.now() - started) / 1000));
      }, 250);
      try {
        const response = await fetch(form.getAttribute("action") || window.location.href, {
          method: "POST",
          body: new FormData(form, button),
          credentials: "same-origin",
        });
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = doc.querySelector("[data-cluster-page]");
        if (!fresh) throw new Error(`the server answered ${response.status}`);
        page.replaceWith(document.importNode(fresh, true));
        bind();
      } catch (error) {
        progress.textContent = `The test could not be run: ${error.message}`;
        button.removeAttribute("aria-disabled");
        button.textContent = "Test connection";
        waiting = false;
      } finally {
        window.clearInterval(ticker);
      }
    });
  }

  bind();
})();
