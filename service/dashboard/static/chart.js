// A small line chart in SVG (no library): one series of (step, value)
// points with min/max ticks. Every element is built with the DOM API;
// nothing is parsed from strings, so values cannot inject markup.
const NS = "http://www.w3.org/2000/svg";
const W = 360, H = 180, L = 48, R = 8, T = 8, B = 22;

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmt(v) {
  if (!isFinite(v)) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

// Draws points [{x, y}] into `svg` (replacing its content).
export function drawChart(svg, points) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("data-count", String(points.length));
  if (points.length === 0) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no points yet"));
    return;
  }
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const p of points) {
    x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x);
    y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y);
  }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  for (const f of [0, 0.5, 1]) {
    const y = y0 + f * (y1 - y0);
    svg.append(el("line", { class: "grid", x1: L, x2: W - R, y1: py(y), y2: py(y) }));
    svg.append(el("text", { x: L - 4, y: py(y) + 3, "text-anchor": "end" }, fmt(y)));
  }
  svg.append(el("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  svg.append(el("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.append(el("text", { x: L, y: H - 6 }, `step ${fmt(x0)}`));
  svg.append(el("text", { x: W - R, y: H - 6, "text-anchor": "end" }, fmt(x1)));
  const coords = points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(" ");
  svg.append(el("polyline", { class: "series", points: coords }));
  if (points.length <= 60) {
    for (const p of points) svg.append(el("circle", { class: "dot", cx: px(p.x), cy: py(p.y), r: 2 }));
  }
}
