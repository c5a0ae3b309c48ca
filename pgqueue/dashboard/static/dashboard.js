// pgqueue dashboard: live refresh of the overview and confirmation of single-job actions.
// Plain DOM code, no library: an element with data-refresh="URL" has its HTML replaced by a
// fetch of URL every data-every milliseconds while the tab is visible (or when told, below).
(function () {
  "use strict";

  // With data-live="URL" (PostgreSQL), a server-sent event stream says when something changed:
  // while it is open the element refreshes on its "changed" events, and polls only every
  // SLOW times data-every in case a change went unannounced (a job claimed, a retry's wait
  // ending). A hidden tab closes its stream (streams are capped per server); a stream that
  // fails or is refused polls as before and tries again a minute later.
  var SLOW = 6;

  function refresh(element) {
    var url = element.getAttribute("data-refresh");
    var every = parseInt(element.getAttribute("data-every"), 10) || 5000;
    var liveUrl = element.getAttribute("data-live");
    var busy = false;
    var again = false;
    var timer = null;
    var source = null;
    var retryLater = null;
    function tick() {
      if (document.hidden) return;
      if (busy) { again = true; return; }
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
        .then(function () {
          busy = false;
          if (again) { again = false; tick(); }
        });
    }
    function poll(interval) {
      if (timer !== null) clearInterval(timer);
      timer = setInterval(tick, interval);
    }
    function listen() {
      if (!liveUrl || source !== null || document.hidden || !window.EventSource) return;
      var opened = false;
      source = new EventSource(liveUrl, { withCredentials: true });
      source.addEventListener("open", function () {
        // A stream that ended reconnects: whatever changed in between is fetched now.
        if (opened) tick();
        opened = true;
        element.setAttribute("data-live-open", "true");
        poll(every * SLOW);
      });
      source.addEventListener("changed", tick);
      source.addEventListener("error", function () {
        element.removeAttribute("data-live-open");
        poll(every);
        if (source && source.readyState === EventSource.CLOSED) {
          source = null;  // refused (full, or no live here): poll, and ask again later
          retryLater = setTimeout(function () { retryLater = null; listen(); }, 60000);
        }
      });
    }
    function hush() {
      if (source !== null) { source.close(); source = null; }
      element.removeAttribute("data-live-open");
      poll(every);
    }
    poll(every);
    listen();
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { hush(); return; }
      tick();
      if (retryLater === null) listen();
    });
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
