/* Catalog pages: copy buttons for request snippets, and the "Compare selected" counter.
   No inline scripts (CSP); everything is delegated from document so htmx-swapped content works too. */
(function () {
  "use strict";

  var RESET_MS = 2000;

  function setStatus(button, text, state) {
    var statusId = button.getAttribute("aria-describedby");
    var status = statusId ? document.getElementById(statusId) : null;
    button.textContent = text;
    button.setAttribute("data-copy-state", state);
    if (status) { status.textContent = state === "copied" ? "Copied to the clipboard." : ""; }
    window.clearTimeout(button._catalogReset);
    button._catalogReset = window.setTimeout(function () {
      button.textContent = "Copy";
      button.removeAttribute("data-copy-state");
      if (status) { status.textContent = ""; }
    }, RESET_MS);
  }

  function selectNode(node) {
    var selection = window.getSelection();
    var range = document.createRange();
    range.selectNodeContents(node);
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function fallbackCopy(text, node) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "copy-buffer";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    if (!ok) { selectNode(node); }
    return ok;
  }

  function copy(button) {
    var target = document.getElementById(button.getAttribute("data-copy-target"));
    if (!target) { return; }
    var text = target.textContent;
    var done = function () { setStatus(button, "Copied", "copied"); };
    var manual = function () {
      if (fallbackCopy(text, target)) { done(); } else { setStatus(button, "Press Ctrl+C", "manual"); }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, manual);
    } else {
      manual();
    }
  }

  function updateCompare() {
    var form = document.getElementById("compare-form");
    if (!form) { return; }
    var picked = form.querySelectorAll("input[name='o']:checked").length;
    var button = document.getElementById("compare-button");
    var hint = form.querySelector("[data-compare-count]");
    if (hint) {
      hint.textContent = picked === 0 ? "Tick 2–4 offerings." : picked + " selected" +
        (picked < 2 ? " — tick at least 2." : picked > 4 ? " — at most 4." : ".");
    }
    if (button) { button.setAttribute("aria-disabled", picked < 2 || picked > 4 ? "true" : "false"); }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (button) { event.preventDefault(); copy(button); }
  });
  document.addEventListener("change", function (event) {
    if (event.target.matches("#compare-form input[name='o']")) { updateCompare(); }
  });
  // A filter request can be in flight while the user ticks a box (blurring the filter field fires "change"):
  // the ticks as they are when the new rows arrive win over the ones the request carried.
  var picked = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "results") {
      picked = Array.prototype.map.call(
        document.querySelectorAll("#compare-form input[name='o']:checked"), function (input) { return input.value; });
    }
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (picked !== null) {
      document.querySelectorAll("#compare-form input[name='o']").forEach(function (input) {
        input.checked = picked.indexOf(input.value) !== -1;
      });
      picked = null;
    }
    updateCompare();
  });
  document.addEventListener("DOMContentLoaded", updateCompare);
})();
