// choreo console: the order and saga boxes, and the overview's live refresh from /api/overview.
// Every value is written with textContent, never as HTML.
(function () {
  "use strict";
  // The header's boxes open /orders/<id> and /sagas/<id>, the id escaped.
  function box(formId, inputId, prefix) {
    var form = document.getElementById(formId);
    if (!form) { return; }
    form.addEventListener("submit", function (e) {
      var id = document.getElementById(inputId).value.trim();
      e.preventDefault();
      if (id) { window.location.href = prefix + encodeURIComponent(id); }
    });
  }
  box("goto", "goto-id", "/orders/");
  box("goto-saga", "goto-saga-id", "/sagas/");
  var root = document.getElementById("overview");
  if (!root) { return; }
  var period = parseInt(root.getAttribute("data-refresh"), 10) || 5000;

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function link(href, text, cls) {
    var a = el("a", text, cls);
    a.setAttribute("href", href);
    return a;
  }
  function state(s) { return el("span", s, "state " + String(s).toLowerCase()); }
  function row(cells) {
    var tr = document.createElement("tr");
    cells.forEach(function (c) {
      var td = document.createElement("td");
      if (c && c.cls) { td.className = c.cls; }
      var v = c && c.node !== undefined ? c.node : c;
      if (v instanceof Node) { td.appendChild(v); } else { td.textContent = v === undefined || v === null ? "" : String(v); }
      tr.appendChild(td);
    });
    return tr;
  }
  function fill(id, rows, empty, cols) {
    var tbody = document.querySelector("#" + id + " tbody");
    tbody.textContent = "";
    if (!rows || rows.length === 0) {
      var tr = row([empty]); tr.className = "empty"; tr.firstChild.colSpan = cols; tbody.appendChild(tr);
      return;
    }
    rows.forEach(function (r) { tbody.appendChild(r); });
  }
  function showError(id, msg) {
    var p = document.getElementById(id);
    p.textContent = msg || "";
    p.hidden = !msg;
  }
  function q(params) {
    return Object.keys(params).map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); }).join("&");
  }
  function render(ov) {
    document.getElementById("ov-at").textContent = ov.at.replace("T", " ").replace(/\.(\d{3})\d*Z$/, ".$1Z");
    showError("states-error", ov.states_error);
    fill("states", (ov.states || []).map(function (s) {
      return row([{ node: state(s.state) }, { node: s.count, cls: "num" }, { node: s.stuck, cls: s.stuck ? "num hot" : "num" }]);
    }), "-", 3);
    document.getElementById("states-since").textContent = "every order in the order service's database, earlier runs included" +
      (ov.states_since ? ": created since " + ov.states_since : "");
    if (ov.tracker) {
      showError("sagas-error", ov.sagas_error);
      fill("sagas", (ov.sagas || []).map(function (c) {
        return row([{ node: link("/sagas/?" + q({ saga: c.saga }), c.saga) }, { node: c.in_flight, cls: "num" },
          { node: c.stuck, cls: c.stuck ? "num hot" : "num" }, { node: c.completed, cls: "num" }, c.since || "-"]);
      }), "no sagas declared", 5);
      showError("stuck-sagas-error", ov.stuck_sagas_error);
      fill("stuck-sagas", (ov.stuck_sagas || []).map(function (x) {
        return row([x.saga, { node: link("/sagas/" + encodeURIComponent(x.correlation_id), x.correlation_id, "mono") }, x.waiting,
          { node: x.stuck_for, cls: "num" }, { node: x.dead_letters, cls: x.dead_letters ? "num hot" : "num" }]);
      }), "no stuck sagas", 5);
    }
    showError("stuck-error", ov.stuck_error);
    fill("stuck", (ov.stuck || []).map(function (o) {
      var trace = o.jaeger_url && /^https?:\/\//.test(o.jaeger_url) ? link(o.jaeger_url, o.trace_id, "mono") : el("span", o.trace_id || "-", "mono");
      if (trace.tagName === "A") { trace.rel = "noreferrer"; trace.target = "_blank"; }
      return row([{ node: link("/orders/" + encodeURIComponent(o.id), o.id, "mono") }, { node: state(o.state) }, o.customer,
        { node: o.age, cls: "num" }, o.since, o.deadline || "-", { node: trace }]);
    }), "no stuck orders", 7);
    showError("dlq-error", ov.dead_letters_error);
    fill("deadletters", (ov.dead_letters || []).map(function (d) {
      return row([{ node: link("/dlq?" + q({ topic: d.topic, reason: d.reason, group: d.group }), d.topic) }, d.reason, d.group, { node: d.count, cls: "num hot" }]);
    }), "no dead letters", 4);
    showError("lag-error", ov.lag_error);
    fill("lag", (ov.lag || []).map(function (g) {
      var parts = el("span");
      (g.partitions || []).forEach(function (p) {
        var s = el("span", p.partition + ":" + p.lag, p.lag > 0 ? "part hot" : "part");
        s.title = "commit " + p.commit + ", end " + p.end;
        parts.appendChild(s); parts.appendChild(document.createTextNode(" "));
      });
      var name = el("span", g.group + " "); name.appendChild(el("small", g.state, "muted"));
      return row([{ node: name }, g.topic, { node: g.total, cls: g.total ? "num hot" : "num" }, { node: parts, cls: "parts" }]);
    }), "no consumer groups", 4);
    showError("outbox-error", ov.outbox_error);
    fill("outbox", (ov.outbox || []).map(function (b) {
      if (b.error) { var r = row([b.service, { node: b.error, cls: "muted" }]); r.lastChild.colSpan = 4; return r; }
      return row([b.service, b.table, { node: b.rows, cls: "num" }, { node: b.oldest_age_seconds.toFixed(1) + "s", cls: "num" }, b.leader ? "leader" : "standby"]);
    }), "-", 5);
    root.setAttribute("data-refreshed", String(Date.now()));
  }
  var status = document.getElementById("ov-status");
  function tick() {
    fetch("/api/overview", { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (ov) { render(ov); status.textContent = ""; })
      .catch(function (e) { status.textContent = "· refresh failed: " + e.message; })
      .then(function () { setTimeout(tick, period); });
  }
  setTimeout(tick, period);
})();
