// obsmem ui: the live thread page. Polls a small JSON state; when it changes, fetches this
// page again and swaps every [data-live] section in place (no reload, scroll kept).
(function () {
  "use strict";
  var script = document.getElementById("live-script");
  if (!script) { return; }
  var stateUrl = script.getAttribute("data-state");
  var every = parseInt(script.getAttribute("data-poll") || "1000", 10);
  // The state is a flat object: compare it with its keys sorted.
  function canonical(obj) { return JSON.stringify(obj, Object.keys(obj).sort()); }
  var initial = script.getAttribute("data-initial");
  var last = initial ? canonical(JSON.parse(initial)) : null;
  var busy = false;

  function openDetails() {
    var open = {};
    document.querySelectorAll("[data-live]").forEach(function (section) {
      open[section.id] = Array.prototype.map.call(
        section.querySelectorAll("details"), function (d) { return d.open; });
    });
    return open;
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var open = openDetails();
    document.querySelectorAll("[data-live]").forEach(function (section) {
      var fresh = doc.getElementById(section.id);
      if (!fresh) { return; }
      section.innerHTML = fresh.innerHTML;
      var states = open[section.id] || [];
      section.querySelectorAll("details").forEach(function (d, i) {
        if (states[i]) { d.open = true; }
      });
    });
    var status = document.getElementById("live-status");
    if (status) { status.textContent = "live · updated " + new Date().toLocaleTimeString(); }
  }

  function tick() {
    if (busy) { return; }
    busy = true;
    fetch(stateUrl, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data === null) { return null; }
        var text = canonical(data);
        if (last === null) { last = text; return null; }
        if (text === last) { return null; }
        last = text;
        return fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html) { swap(html); } });
      })
      .catch(function () {
        var status = document.getElementById("live-status");
        if (status) { status.textContent = "live · server unreachable"; }
      })
      .then(function () { busy = false; });
  }

  tick();
  window.setInterval(tick, every);
})();
