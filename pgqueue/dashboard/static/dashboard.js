// pgqueue dashboard: live refresh of the overview and confirmation of single-job actions.
// Plain DOM code, no library: an element with data-refresh="URL" has its HTML replaced by a
// fetch of URL every data-every milliseconds while the tab is visible.
(function () {
  "use strict";

  function refresh(element) {
    var url = element.getAttribute("data-refresh");
    var every = parseInt(element.getAttribute("data-every"), 10) || 5000;
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status + " " + response.statusText);
          return response.text();
        })
        .then(function (html) {
          element.innerHTML = html;
          element.removeAttribute("data-stale");
          element.setAttribute("data-updated", String(Date.now()));
        })
        .catch(function () { element.setAttribute("data-stale", "true"); })
        .then(function () { busy = false; });
    }
    setInterval(tick, every);
    document.addEventListener("visibilitychange", tick);
  }

  function picked() {
    return document.querySelectorAll("input.pick:checked").length;
  }

  function confirmations() {
    document.addEventListener("submit", function (event) {
      var button = event.submitter || event.target.querySelector("[data-confirm]");
      var question = button && button.getAttribute("data-confirm");
      var verb = button && button.getAttribute("data-confirm-selected");
      if (verb) {
        var count = picked();
        if (!count) {
          window.alert("Select jobs first (the boxes on the left).");
          event.preventDefault();
          return;
        }
        question = verb + " " + count + " selected job" + (count === 1 ? "" : "s") + "?";
      }
      if (question && !window.confirm(question)) event.preventDefault();
    });
  }

  // The jobs list's checkboxes: one in the header selects the whole page; a count says how
  // many are selected.
  function selection() {
    var all = document.getElementById("select-all");
    var shown = document.getElementById("selected-count");
    function update() { if (shown) shown.textContent = String(picked()); }
    if (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
        update();
      });
    }
    document.addEventListener("change", function (event) {
      if (event.target.classList && event.target.classList.contains("pick")) update();
    });
    update();
  }

  // An action's outcome arrives as ?message=... on the page it redirects to. Shown once: the
  // address loses it at once, so a reload (or a bookmark) does not say it again later, when it
  // may no longer be true.
  function forgetMessage() {
    var url = new URL(window.location.href);
    if (!url.searchParams.has("message")) return;
    url.searchParams.delete("message");
    window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
  }

  document.addEventListener("DOMContentLoaded", function () {
    forgetMessage();
    document.querySelectorAll("[data-refresh]").forEach(refresh);
    confirmations();
    selection();
  });
})();
