// Small SVG charts for the console (no library): line charts over a time window and
// horizontal bars. Only DOM APIs are used (no innerHTML), so the page's strict
// Content-Security-Policy holds.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#0b5cad", "#a4161a", "#1d6b2f", "#8a5300", "#6a1b9a", "#00695c", "#37474f", "#c2185b"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceMax(value) {
    if (value <= 0) return 1;
    const pow = Math.pow(10, Math.floor(Math.log10(value)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * pow >= value) return m * pow;
    return 10 * pow;
  }

  // series: [{name, values: [number], color?}], all of the same length (oldest first).
  function lines(container, series, opts) {
    const o = Object.assign({ width: 600, height: 180, unit: "", xLabel: "" }, opts || {});
    const pad = { l: 44, r: 8, t: 8, b: 22 };
    const w = o.width - pad.l - pad.r, h = o.height - pad.t - pad.b;
    const n = Math.max(2, ...series.map((s) => s.values.length));
    const max = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
    const svg = el("svg", { viewBox: `0 0 ${o.width} ${o.height}`, role: "presentation" });
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + h - (h * i) / 4;
      el("line", { x1: pad.l, x2: pad.l + w, y1: y, y2: y, stroke: "#d5dbe1", "stroke-width": 1 }, svg);
      const t = el("text", { x: pad.l - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#4a5561" }, svg);
      t.textContent = formatNumber((max * i) / 4) + o.unit;
    }
    if (o.xLabel) {
      const t = el("text", { x: pad.l + w, y: o.height - 4, "text-anchor": "end", "font-size": 11, fill: "#4a5561" }, svg);
      t.textContent = o.xLabel;
    }
    series.forEach((s, k) => {
      const color = s.color || PALETTE[k % PALETTE.length];
      const pts = s.values.map((v, i) => {
        const x = pad.l + (w * (i + (n - s.values.length))) / (n - 1);
        const y = pad.t + h - (h * v) / max;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      if (pts.length) {
        el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 2,
          "stroke-linejoin": "round", "data-series": s.name }, svg);
      }
    });
    container.replaceChildren(svg);
    return svg;
  }

  // items: [{label, value, text}]: horizontal bars scaled to the largest value.
  function bars(container, items, opts) {
    const o = Object.assign({ width: 600, row: 26 }, opts || {});
    const height = Math.max(1, items.length) * o.row + 8;
    const max = Math.max(1e-9, ...items.map((i) => i.value));
    const svg = el("svg", { viewBox: `0 0 ${o.width} ${height}`, role: "presentation" });
    const labelW = 140, textW = 90, w = o.width - labelW - textW;
    items.forEach((item, k) => {
      const y = 4 + k * o.row;
      const label = el("text", { x: labelW - 6, y: y + o.row / 2 + 4, "text-anchor": "end", "font-size": 12, fill: "#1a1f24" }, svg);
      label.textContent = item.label;
      el("rect", { x: labelW, y: y + 4, width: Math.max(1, (w * item.value) / max), height: o.row - 10,
        fill: item.color || PALETTE[k % PALETTE.length], rx: 3 }, svg);
      const t = el("text", { x: o.width - textW + 6, y: y + o.row / 2 + 4, "font-size": 12, fill: "#1a1f24" }, svg);
      t.textContent = item.text;
    });
    container.replaceChildren(svg);
    return svg;
  }

  function formatNumber(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    if (Number.isInteger(v)) return String(v);
    return v < 1 ? v.toFixed(2) : v.toFixed(1);
  }

  window.TurnstileCharts = { lines, bars, palette: PALETTE, formatNumber };
})();
