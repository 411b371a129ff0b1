// The status page's live part (BEHAVIOUR §11): no inline script, text only (never innerHTML of data).
"use strict";
(function () {
  var live = document.getElementById("live");
  var version = live ? live.getAttribute("data-version") : "0";
  function eventFilter() {
    var select = document.getElementById("event-role");
    if (!select) return;
    var want = select.value;
    document.querySelectorAll("#events tr.event").forEach(function (tr) {
      tr.classList.toggle("hidden", want !== "" && tr.getAttribute("data-role") !== want);
    });
  }
  function wireFilter() {
    var select = document.getElementById("event-role");
    if (select) select.addEventListener("change", eventFilter);
    eventFilter();
  }
  function refresh() {
    var select = document.getElementById("event-role");
    var keep = select ? select.value : "";
    fetch("/status/live", {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        // The server escaped every value; the parsed fragment replaces the old one.
        var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
        var fresh = doc.body.firstElementChild;
        live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
        var again = document.getElementById("event-role");
        if (again) again.value = keep;
        wireFilter();
      })
      .catch(function () {});
  }
  if (live && window.EventSource) {
    var passes = new EventSource("/status/stream");
    passes.addEventListener("pass", function (e) {
      if (e.data !== version) { version = e.data; refresh(); }
    });
  }
  wireFilter();
  var logRole = document.getElementById("log-role");
  var logLines = document.getElementById("log-lines");
  var logState = document.getElementById("log-state");
  var following = null;
  function follow(role) {
    if (following) { following.close(); following = null; }
    logLines.textContent = "";
    if (!role || !window.EventSource) return;
    following = new EventSource("/status/logs?role=" + encodeURIComponent(role));
    following.addEventListener("line", function (e) {
      logLines.appendChild(document.createTextNode(e.data + "\n"));
      logLines.scrollTop = logLines.scrollHeight;
    });
    following.addEventListener("note", function (e) { logState.textContent = e.data; });
    following.onerror = function () { logState.textContent = "reconnecting…"; };
  }
  if (logRole) {
    logRole.addEventListener("change", function () { follow(logRole.value); });
    if (logRole.value) follow(logRole.value);
  }
}());
