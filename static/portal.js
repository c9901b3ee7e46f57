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

/* Forms that say their limits before submit (docs/quota.md, docs/access.md). */
(function () {
  "use strict";

  function accessScope() {
    var kind = document.querySelector("select[data-controls='access-scope']");
    if (!kind) { return; }
    var adminAccess = kind.value === "admin-access";
    ["id_service_account", "id_workload"].forEach(function (id) {
      var input = document.getElementById(id);
      if (!input) { return; }
      input.disabled = adminAccess;
      if (adminAccess) { input.value = ""; }
    });
    var hours = document.getElementById("id_window_hours");
    if (hours && hours.dataset.maxHours) {
      var max = JSON.parse(hours.dataset.maxHours)[kind.value];
      if (max) { hours.max = String(max); }
    }
  }

  function quotaTotal() {
    var form = document.querySelector("form.quota-request");
    if (!form || !form.dataset.figures) { return; }
    var figures = JSON.parse(form.dataset.figures);
    var target = form.querySelector("#id_target"), offering = form.querySelector("#id_offering");
    var units = parseInt(form.querySelector("#id_units").value, 10) || 0;
    var key = target.value + "|" + (offering.value || "");
    var granted = figures.granted[key] || 0;
    var physical = figures.physical[target.value.split("/")[0] + "|" + (offering.value || "")];
    var total = granted + units;
    var out = document.getElementById("quota-total");
    out.textContent = "Granted by the portal now: " + granted.toLocaleString() + " · after this request: " + total.toLocaleString()
      + (physical ? " of " + physical.toLocaleString() + " physical units" : "");
    var warning = document.getElementById("quota-over-capacity");
    var over = Boolean(physical) && total > physical;
    warning.hidden = !over;
    if (over) {
      warning.querySelector("[data-figures]").textContent = total.toLocaleString() + " units against "
        + physical.toLocaleString() + " physical";
    }
    form.querySelector("#id_over_capacity").required = over;
  }

  function refresh() { accessScope(); quotaTotal(); }
  document.addEventListener("DOMContentLoaded", refresh);
  document.addEventListener("change", refresh);
  document.addEventListener("input", function (event) {
    if (event.target && event.target.id === "id_units") { quotaTotal(); }
  });
})();
