// Training curves of one worker or cluster: a chart per scalar name, a line
// per worker or rank, and under each chart a summary card per line (last and
// best value, steps/s, ETA when the run's total steps are known). Series come
// from GET .../metrics (JSON `series`) and grow with the event stream's
// `metrics` events (rows of a report). Everything goes into the DOM as text.
import { COLORS, drawChart, fmt } from "./chart.js";

const CLASSIC = ["loss", "accuracy", "images_per_sec", "lr"];
const LABELS = { loss: "loss", accuracy: "accuracy", images_per_sec: "images/s", lr: "learning rate" };
// Which way is better: names like these go up as training improves, the rest down (loss, error, ...).
const HIGHER_IS_BETTER = /acc|auc|precision|recall|f1|score|iou|map|per_sec|throughput|reward|bleu/i;
const MAX_POINTS = 4000;  // per line in the page: a longer one loses every other point
const RATE_WINDOW_S = 60; // steps/s over the newest minute of a line

export function chartId(name) { return "chart-" + name.replace(/[^A-Za-z0-9_-]/g, "_"); }

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function duration(seconds) {
  let s = Math.max(0, Math.round(seconds));
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const mm = Math.floor(s / 60); s -= mm * 60;
  return (hh ? `${hh}h ` : "") + (hh || mm ? `${mm}m ` : "") + `${s}s`;
}

// Last, best, steps/s and ETA of one line's points [{step, value, time}].
export function summarize(name, points, totalSteps) {
  if (!points.length) return null;
  const last = points[points.length - 1];
  const higher = HIGHER_IS_BETTER.test(name);
  let best = points[0];
  for (const p of points) if (higher ? p.value > best.value : p.value < best.value) best = p;
  let first = last;
  for (let i = points.length - 1; i >= 0 && last.time - points[i].time <= RATE_WINDOW_S; --i) first = points[i];
  const rate = last.time > first.time ? (last.step - first.step) / (last.time - first.time) : null;
  let eta = null;
  if (totalSteps) eta = last.step >= totalSteps ? 0 : (rate > 0 ? (totalSteps - last.step) / rate : null);
  return { last, best, rate, eta, higher };
}

export class Curves {
  // labelOf(worker_id, rank): the line's name ("rank 1", "worker 0").
  constructor(container, labelOf) {
    this.container = container;
    this.labelOf = labelOf;
    this.series = new Map();  // "worker|rank|name" -> {worker_id, rank, name, total_steps, points}
    this.loaded = false;
    this.pending = [];
    this.queued = false;
  }

  key(worker, rank, name) { return `${worker}|${rank ?? ""}|${name}`; }

  add(worker, rank, name, totalSteps, point) {
    const k = this.key(worker, rank, name);
    let s = this.series.get(k);
    if (!s) {
      s = { worker_id: worker, rank, name, total_steps: null, points: [] };
      this.series.set(k, s);
    }
    if (totalSteps) s.total_steps = totalSteps;
    const n = s.points.length;
    if (n && (point.time < s.points[n - 1].time || (point.time === s.points[n - 1].time && point.step === s.points[n - 1].step))) {
      return;  // already there (a report seen both in the download and as an event)
    }
    s.points.push(point);
    if (s.points.length > MAX_POINTS) {
      s.points = s.points.filter((p, i) => i % 2 === 0 || i === s.points.length - 1);
    }
  }

  // The JSON `series` of GET .../metrics.
  load(series) {
    for (const s of series) {
      for (const [step, value, time] of s.points) this.add(s.worker_id, s.rank, s.name, s.total_steps, { step, value, time });
    }
    this.loaded = true;
    this.addRows(this.pending);
    this.pending = [];
    this.render();
  }

  // Rows of a report (the `metrics` event).
  addRows(rows) {
    if (!this.loaded) { this.pending.push(...rows); return; }
    for (const r of rows) {
      const values = Object.entries(r.scalars || {});
      for (const c of CLASSIC) if (r[c] !== null && r[c] !== undefined) values.push([c, r[c]]);
      for (const [name, value] of values) {
        this.add(r.worker_id, r.rank, name, r.total_steps, { step: r.step, value, time: r.time });
      }
    }
    this.schedule();
  }

  schedule() {
    if (this.queued) return;
    this.queued = true;
    requestAnimationFrame(() => { this.queued = false; this.render(); });
  }

  render() {
    const all = [...this.series.values()];
    const names = [...new Set(all.map((s) => s.name))].sort((a, b) => {
      const ia = CLASSIC.indexOf(a), ib = CLASSIC.indexOf(b);
      if (ia >= 0 || ib >= 0) return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
      return a.localeCompare(b);
    });
    const order = (s) => `${s.worker_id}|${String(s.rank ?? -1).padStart(6, "0")}`;
    const sources = [...new Set(all.map(order))].sort();
    const color = (s) => COLORS[sources.indexOf(order(s)) % COLORS.length];
    if (!names.length) {
      this.container.replaceChildren(h("p", { class: "muted", id: "no-curves" },
        "No training curves yet: scripts report with muster.metrics.report(...) or muster.metrics.SummaryWriter."));
      return;
    }
    this.container.replaceChildren(...names.map((name) => {
      const lines = all.filter((s) => s.name === name).sort((a, b) => order(a).localeCompare(order(b)));
      const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
      svg.setAttribute("id", chartId(name));
      svg.setAttribute("data-name", name);
      drawChart(svg, lines.map((s) => ({ label: this.labelOf(s.worker_id, s.rank), color: color(s),
        points: s.points.map((p) => ({ x: p.step, y: p.value })) })));
      const rows = lines.map((s) => {
        const sum = summarize(name, s.points, s.total_steps);
        if (!sum) return null;
        const swatch = h("span", { class: "swatch", "data-color": color(s) });
        swatch.style.setProperty("background", color(s));
        return h("tr", { class: "line-summary", "data-label": this.labelOf(s.worker_id, s.rank) },
          h("td", {}, swatch, this.labelOf(s.worker_id, s.rank)),
          h("td", { class: "num last" }, fmt(sum.last.value), h("span", { class: "muted" }, ` @ ${sum.last.step}`)),
          h("td", { class: "num best" }, fmt(sum.best.value), h("span", { class: "muted" }, ` @ ${sum.best.step}`)),
          h("td", { class: "num rate" }, sum.rate === null ? "" : fmt(sum.rate)),
          h("td", { class: "num eta" }, sum.eta === null ? "" : (sum.eta === 0 ? "done" : duration(sum.eta))));
      });
      const higher = HIGHER_IS_BETTER.test(name);
      return h("div", { class: "chart", "data-name": name },
        h("h3", {}, LABELS[name] || name, h("span", { class: "muted" }, " by step")),
        svg,
        h("table", { class: "summary" },
          h("thead", {}, h("tr", {}, h("th", {}, "line"), h("th", {}, "last"),
            h("th", {}, higher ? "best (max)" : "best (min)"), h("th", {}, "steps/s"), h("th", {}, "ETA"))),
          h("tbody", {}, ...rows)));
    }));
  }
}
