// A small line chart in SVG (no library): several lines of (step, value)
// points, one per worker or rank, on axes set from the data (round ticks,
// whole steps on the x axis;
// a flat line gets a band around its value, never a fixed 0..1). Every
// element is built with the DOM API; nothing is parsed from strings, so
// values cannot inject markup.
const NS = "http://www.w3.org/2000/svg";
const W = 360, H = 180, L = 52, R = 10, T = 8, B = 24;
export const COLORS = ["#2f5bd3", "#d9480f", "#2b8a3e", "#ae3ec9", "#e67700", "#0b7285", "#c2255c", "#5c940d"];

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

export function fmt(v) {
  if (!isFinite(v)) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

// Round ticks covering [lo, hi]: about `n` of them at 1, 2 or 5 x 10^k
// (never finer than `minStep`: steps are whole numbers).
export function niceTicks(lo, hi, n = 4, minStep = 0) {
  const span = hi - lo;
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = Math.max(minStep, [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || 10 * mag);
  const first = Math.floor(lo / step) * step, last = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let t = first; t <= last + step / 2; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

// The value axis: the data's range out to the round ticks around it; a
// single value (or a flat line) gets a band of 10% of its size around it
// (1 around zero).
export function valueRange(values) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (hi === lo) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad; hi += pad;
  }
  const ticks = niceTicks(lo, hi, 5);
  return { lo: ticks[0], hi: ticks[ticks.length - 1], ticks };
}

// Draws `lines` ([{label, color, points: [{x, y}]}]) into `svg`, replacing
// its content. data-count: the points drawn; data-lines: the lines.
export function drawChart(svg, lines) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const all = lines.flatMap((l) => l.points);
  svg.setAttribute("data-count", String(all.length));
  svg.setAttribute("data-lines", String(lines.filter((l) => l.points.length).length));
  if (all.length === 0) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no points yet"));
    return;
  }
  let x0 = Math.min(...all.map((p) => p.x)), x1 = Math.max(...all.map((p) => p.x));
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  const y = valueRange(all.map((p) => p.y));
  svg.setAttribute("data-y-min", String(y.lo));
  svg.setAttribute("data-y-max", String(y.hi));
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (v) => H - B - (v - y.lo) / (y.hi - y.lo) * (H - T - B);
  for (const t of y.ticks) {
    svg.append(el("line", { class: "grid", x1: L, x2: W - R, y1: py(t), y2: py(t) }));
    svg.append(el("text", { x: L - 4, y: py(t) + 3, "text-anchor": "end" }, fmt(t)));
  }
  svg.append(el("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  svg.append(el("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  for (const t of niceTicks(x0, x1, 4, 1).filter((t) => t >= x0 && t <= x1)) {
    svg.append(el("line", { class: "axis", x1: px(t), x2: px(t), y1: H - B, y2: H - B + 3 }));
    svg.append(el("text", { x: px(t), y: H - 8, "text-anchor": "middle" }, fmt(t)));
  }
  for (const line of lines) {
    if (!line.points.length) continue;
    const coords = line.points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { class: "series", points: coords, stroke: line.color, "data-label": line.label }));
    if (line.points.length <= 40) {
      for (const p of line.points) svg.append(el("circle", { class: "dot", cx: px(p.x), cy: py(p.y), r: 2, fill: line.color }));
    }
  }
}
