/* Every page: the narrow-screen menu button. No inline scripts (CSP). */
(function () {
  "use strict";

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest(".nav-toggle") : null;
    if (!button) { return; }
    var open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", open ? "true" : "false");
    document.body.classList.toggle("nav-open", open);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || !document.body.classList.contains("nav-open")) { return; }
    var button = document.querySelector(".nav-toggle");
    document.body.classList.remove("nav-open");
    if (button) { button.setAttribute("aria-expanded", "false"); button.focus(); }
  });
})();
