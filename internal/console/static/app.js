// AX console: live overview, charts (uPlot) and the DAG drawing (dagre).
// Everything works without this file except the live refresh and drawings.
(function () {
  "use strict";

  var stateColors = {
    waiting: "#8a94a6", ready: "#3b82f6", running: "#8b5cf6", retrying: "#f59e0b",
    succeeded: "#16a34a", failed: "#dc2626", cancelled: "#6b7280", expired: "#a16207", unknown: "#9ca3af"
  };

  function widths() {
    document.querySelectorAll("[data-w]").forEach(function (e) {
      e.style.width = e.getAttribute("data-w") + "%";
    });
  }

  // ---- overview: live refresh ----
  var charts = {};

  function drawCharts(series) {
    var box = document.getElementById("charts");
    if (!box || !window.uPlot || !series) return;
    var types = (series.types || []).slice(0, 12);
    var none = document.getElementById("nocharts");
    if (none) none.style.display = types.length ? "none" : "";
    var xs = series.buckets || [];
    types.forEach(function (t) {
      var data = [xs, series.succeeded[t], series.failed[t]];
      if (charts[t]) { charts[t].setData(data); return; }
      var div = document.createElement("div");
      div.className = "chart";
      div.setAttribute("data-type", t);
      var h = document.createElement("h3");
      var a = document.createElement("a");
      a.href = "/tasks?type=" + encodeURIComponent(t);
      a.textContent = t;
      h.appendChild(a);
      var key = document.createElement("span");
      key.className = "key";
      key.innerHTML = '<i class="k-ok"></i>ok <i class="k-bad"></i>failed <small>per min</small>';
      h.appendChild(key);
      div.appendChild(h);
      box.appendChild(div);
      charts[t] = new uPlot({
        width: 300, height: 110, legend: { show: false },
        scales: { x: { time: true } },
        axes: [{ size: 24, font: "10px sans-serif" }, { size: 34, font: "10px sans-serif" }],
        series: [{}, { label: "ok/min", stroke: stateColors.succeeded, width: 1.5, fill: "rgba(22,163,74,0.08)" },
                 { label: "failed/min", stroke: stateColors.failed, width: 1.5 }]
      }, data, div);
    });
  }

  // Any page with a #live region (the overview, the Workers page, a task
  // page whose handler runs) refreshes it from its data-refresh URL.
  function refreshLive() {
    var live = document.getElementById("live");
    if (!live) return;
    var busy = live.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
    if (!busy) {
      fetch(live.getAttribute("data-refresh"), { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) { if (html !== null) { live.innerHTML = html; widths(); } }).catch(function () {});
    }
    if (!document.getElementById("charts")) return;
    fetch("/api/overview", { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (o) {
      drawCharts(o.series);
      var u = document.getElementById("updated");
      if (u && o.at) u.textContent = "updated " + o.at.replace("T", " ").replace(/\..*$/, "") + " UTC · live";
    }).catch(function () {});
  }

  // ---- task page: the DAG ----
  function drawDAG() {
    var box = document.getElementById("dag");
    var src = document.getElementById("dag-data");
    if (!box || !src || !window.dagre) return;
    var g = JSON.parse(src.textContent);
    var graph = new dagre.graphlib.Graph();
    graph.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 40, marginx: 8, marginy: 8 });
    graph.setDefaultEdgeLabel(function () { return {}; });
    g.nodes.forEach(function (n) {
      var label = n.id.length > 26 ? n.id.slice(0, 12) + "…" + n.id.slice(-12) : n.id;
      n.label = label;
      graph.setNode(n.id, { width: Math.max(110, label.length * 7 + 16), height: 40, n: n });
    });
    g.edges.forEach(function (e) { graph.setEdge(e.from, e.to); });
    dagre.layout(graph);
    var ns = "http://www.w3.org/2000/svg";
    var info = graph.graph();
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", info.width);
    svg.setAttribute("height", info.height);
    svg.setAttribute("viewBox", "0 0 " + info.width + " " + info.height);
    svg.setAttribute("class", "dag-svg");
    var defs = document.createElementNS(ns, "defs");
    defs.innerHTML = '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#94a3b8"/></marker>';
    svg.appendChild(defs);
    graph.edges().forEach(function (e) {
      var pts = graph.edge(e).points;
      var d = "M" + pts.map(function (p) { return p.x + "," + p.y; }).join("L");
      var path = document.createElementNS(ns, "path");
      path.setAttribute("d", d);
      path.setAttribute("class", "edge");
      path.setAttribute("marker-end", "url(#arrow)");
      svg.appendChild(path);
    });
    graph.nodes().forEach(function (id) {
      var v = graph.node(id), n = v.n;
      var a = document.createElementNS(ns, "a");
      a.setAttribute("href", "/task/" + n.id.split("/").map(encodeURIComponent).join("/"));
      a.setAttribute("class", "node" + (n.self ? " self" : ""));
      a.setAttribute("data-id", n.id);
      var title = document.createElementNS(ns, "title");
      title.textContent = n.id + " · " + (n.type || "") + " · " + n.state;
      a.appendChild(title);
      var r = document.createElementNS(ns, "rect");
      r.setAttribute("x", v.x - v.width / 2); r.setAttribute("y", v.y - v.height / 2);
      r.setAttribute("width", v.width); r.setAttribute("height", v.height);
      r.setAttribute("rx", 6);
      r.setAttribute("stroke", stateColors[n.state] || "#999");
      a.appendChild(r);
      var bar = document.createElementNS(ns, "rect");
      bar.setAttribute("x", v.x - v.width / 2); bar.setAttribute("y", v.y - v.height / 2);
      bar.setAttribute("width", 6); bar.setAttribute("height", v.height);
      bar.setAttribute("fill", stateColors[n.state] || "#999");
      a.appendChild(bar);
      var t1 = document.createElementNS(ns, "text");
      t1.setAttribute("x", v.x + 3); t1.setAttribute("y", v.y - 3);
      t1.setAttribute("class", "nid");
      t1.textContent = n.label;
      a.appendChild(t1);
      var t2 = document.createElementNS(ns, "text");
      t2.setAttribute("x", v.x + 3); t2.setAttribute("y", v.y + 12);
      t2.setAttribute("class", "nstate");
      t2.textContent = n.state + (n.type ? " · " + n.type : "");
      a.appendChild(t2);
      svg.appendChild(a);
    });
    box.appendChild(svg);
    box.setAttribute("data-drawn", "true");
  }

  function loadScript(src, done) {
    var s = document.createElement("script");
    s.src = src;
    s.onload = done;
    document.head.appendChild(s);
  }

  document.addEventListener("DOMContentLoaded", function () {
    widths();
    if (document.getElementById("dag-data")) loadScript("/static/vendor/dagre.min.js", drawDAG);
    if (document.getElementById("charts")) {
      loadScript("/static/vendor/uPlot.iife.min.js", function () {
        var s = document.getElementById("series");
        if (s) drawCharts(JSON.parse(s.textContent));
      });
    }
    if (document.getElementById("live")) setInterval(refreshLive, document.getElementById("charts") ? 2000 : 1000);
  });
})();
