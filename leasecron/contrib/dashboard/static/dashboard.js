/* leasecron dashboard: live refresh, local times, lease countdowns. No dependencies.
 *
 * The pages are complete without this script. With it:
 * - every <body data-refresh-ms> milliseconds (0: never) the page fetches its own URL, parses
 *   the answer with DOMParser and replaces <main id="content"> with the new one; not while the
 *   tab is hidden, and not while a field inside main has focus or holds text other than its own
 *   (a note being typed, a schedule being changed), or a form's <details> is open;
 * - each <time data-ms> shows the time in the viewer's zone (its title keeps UTC);
 * - each .live-run[data-lease-left-ms] counts its lease down.
 */
(function () {
  "use strict";

  var body = document.body;
  var refreshMs = parseInt(body.getAttribute("data-refresh-ms") || "0", 10);
  var loadedAt = Date.now();
  var busy = false;
  var format = null;
  try {
    format = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false, timeZoneName: "short"
    });
  } catch (e) {
    format = null;
  }

  function pad(n, width) {
    var s = String(n);
    while (s.length < width) { s = "0" + s; }
    return s;
  }

  function localText(ms) {
    // "2026-12-02 11:00:00 CET" (".123" when the time has milliseconds), in the viewer's zone
    var date = new Date(ms);
    var millis = ms % 1000 ? "." + pad(ms % 1000, 3) : "";
    if (!format || !format.formatToParts) { return date.toString(); }
    var part = {};
    var parts = format.formatToParts(date);
    for (var i = 0; i < parts.length; i++) { part[parts[i].type] = parts[i].value; }
    var hour = part.hour === "24" ? "00" : part.hour;
    return part.year + "-" + part.month + "-" + part.day + " " + hour + ":" + part.minute + ":" +
      part.second + millis + (part.timeZoneName ? " " + part.timeZoneName : "");
  }

  function localTimes(root) {
    var times = root.querySelectorAll("time[data-ms]");
    for (var i = 0; i < times.length; i++) {
      var ms = parseInt(times[i].getAttribute("data-ms"), 10);
      if (!isNaN(ms)) { times[i].textContent = localText(ms); }
    }
  }

  function seconds(ms) {
    if (ms < 1000) { return ms + " ms"; }
    if (ms < 60000) { return (ms / 1000).toFixed(1) + " s"; }
    var s = Math.floor(ms / 1000);
    if (s < 3600) { return Math.floor(s / 60) + "m " + pad(s % 60, 2) + "s"; }
    return Math.floor(s / 3600) + "h " + pad(Math.floor(s % 3600 / 60), 2) + "m";
  }

  function countDown() {
    var runs = document.querySelectorAll(".live-run[data-lease-left-ms]");
    var passed = Date.now() - loadedAt;
    for (var i = 0; i < runs.length; i++) {
      var left = parseInt(runs[i].getAttribute("data-lease-left-ms"), 10) - passed;
      var label = runs[i].querySelector(".left") || runs[i];
      label.textContent = left > 0 ? seconds(left) + " left" : "lease ended";
      runs[i].classList.toggle("ended", left <= 0);
    }
  }

  function editing(main) {
    var active = document.activeElement;
    if (active && active !== body && main.contains(active) && /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(active.tagName)) {
      return true;
    }
    if (main.querySelector("details[open]")) { return true; }
    var fields = main.querySelectorAll("input:not([type=hidden]):not([type=submit]), textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) { return true; }
    }
    return false;
  }

  function refresh() {
    var main = document.getElementById("content");
    if (busy || !main || document.hidden || editing(main) || !window.fetch || !window.DOMParser) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        var current = document.getElementById("content");
        if (fresh && current && !editing(current)) {
          current.replaceWith(document.importNode(fresh, true));
          loadedAt = Date.now();
          localTimes(document.getElementById("content"));
          countDown();
        }
        body.classList.remove("stale");
      })
      .catch(function () {
        body.classList.add("stale");
      })
      .then(function () {
        busy = false;
      });
  }

  localTimes(document);
  countDown();
  window.setInterval(countDown, 100);
  if (refreshMs > 0) {
    window.setInterval(refresh, refreshMs);
  }
}());
