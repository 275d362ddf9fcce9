// The muster dashboard: plain ES module, no build step. Security rules:
// every value from the daemon goes into the page through textContent or
// setAttribute (never parsed as markup), every URL is relative (works on
// 127.0.0.1 and through an SSH tunnel), every state-changing request sends
// the session's CSRF token. Live updates come from one EventSource
// (api/v1/events); logs follow with fetch + ReadableStream.
import { Curves } from "./curves.js";

const state = {
  csrf: null,
  workers: new Map(),
  clusters: new Map(),
  filter: "",
  curves: null,       // the open worker's or cluster's Curves
  events: null,
  view: null,         // { kind, id, abort }
};
const TERMINAL = new Set(["succeeded", "failed", "timedout", "stopped", "lost"]);
const STATUSES = ["scheduling", "starting", "running", "succeeded", "failed", "timedout", "stopped", "lost"];
const $ = (id) => document.getElementById(id);

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function statusBadge(s) { return h("span", { class: `status status-${s}` }, s); }
function fmtTime(t) { return t ? new Date(t).toLocaleString() : ""; }
function duration(w) {
  const start = w.started_at || w.created_at;
  if (!start) return "";
  const end = w.finished_at ? Date.parse(w.finished_at) : Date.now();
  let s = Math.max(0, Math.round((end - Date.parse(start)) / 1000));
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const mm = Math.floor(s / 60); s -= mm * 60;
  return (hh ? `${hh}h ` : "") + (hh || mm ? `${mm}m ` : "") + `${s}s`;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (options.method && options.method !== "GET") {
    headers["Content-Type"] = "application/json";
    if (state.csrf) headers["X-CSRF-Token"] = state.csrf;
  }
  const resp = await fetch(path, Object.assign({}, options, { headers, credentials: "same-origin" }));
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const msg = body && body.error ? body.error.message : `${resp.status} ${resp.statusText}`;
    const err = new Error(msg);
    err.status = resp.status;
    throw err;
  }
  return body;
}

// ---- login ----------------------------------------------------------------

function showLogin(message) {
  if (state.events) { state.events.close(); state.events = null; }
  $("login").hidden = false;
  $("view").replaceChildren();
  $("logout").hidden = true;
  $("login-error").textContent = message || "";
}

async function start() {
  try {
    const s = await api("api/v1/session");
    state.csrf = s.csrf_token;
  } catch (e) {
    return showLogin(e.status === 401 ? "" : e.message);
  }
  $("login").hidden = true;
  $("logout").hidden = false;
  connectEvents();
  route();
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const s = await api("api/v1/session", { method: "POST", body: JSON.stringify({ token: $("login-token").value }) });
    state.csrf = s.csrf_token;
    $("login-token").value = "";
    start();
  } catch (e) {
    $("login-error").textContent = e.message;
  }
});

$("logout").addEventListener("click", async () => {
  try { await api("api/v1/session/logout", { method: "POST", body: "{}" }); } catch (e) { /* already gone */ }
  state.csrf = null;
  showLogin("Logged out.");
});

// ---- live events ----------------------------------------------------------

let renderQueued = false;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; refreshView(); });
}

function connectEvents() {
  const es = new EventSource("api/v1/events");
  state.events = es;
  es.addEventListener("open", () => { $("conn").textContent = "live"; $("conn").className = "conn live"; });
  es.addEventListener("error", async () => {
    $("conn").textContent = "reconnecting"; $("conn").className = "conn";
    try { await api("api/v1/session"); } catch (e) { if (e.status === 401) showLogin("The session ended; log in again."); }
  });
  // The snapshot comes in pieces: part 0 replaces what the page had, the
  // others add to it ("complete" marks the last).
  es.addEventListener("snapshot", (ev) => {
    const d = JSON.parse(ev.data);
    if (!d.part) { state.workers = new Map(); state.clusters = new Map(); }
    for (const w of d.workers || []) state.workers.set(w.id, w);
    for (const c of d.clusters || []) state.clusters.set(c.id, c);
    scheduleRender();
  });
  es.addEventListener("worker", (ev) => { const w = JSON.parse(ev.data); state.workers.set(w.id, w); scheduleRender(); });
  es.addEventListener("cluster", (ev) => { const c = JSON.parse(ev.data); state.clusters.set(c.id, c); scheduleRender(); });
  es.addEventListener("metrics", (ev) => {
    const d = JSON.parse(ev.data);
    const v = state.view;
    if (!state.curves || !v) return;
    if ((v.kind === "cluster" && d.cluster === v.id) || (v.kind === "worker" && d.worker === v.id)) {
      state.curves.addRows(d.points);
    }
  });
}

// ---- routing --------------------------------------------------------------

window.addEventListener("hashchange", route);
// Durations tick in place (a full re-render would replace the buttons under the pointer).
setInterval(() => {
  for (const cell of document.querySelectorAll("td.duration")) {
    const w = state.workers.get(cell.dataset.id);
    if (w && !w.finished_at) cell.textContent = duration(w);
  }
}, 1000);

function route() {
  if (state.view && state.view.abort) state.view.abort.abort();
  state.curves = null;
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  $("nav-workers").className = parts[0] === "clusters" ? "" : "active";
  $("nav-clusters").className = parts[0] === "clusters" ? "active" : "";
  const view = $("view");
  view.replaceChildren();
  if (parts[0] === "workers" && parts[1]) state.view = { kind: "worker", id: parts[1], abort: new AbortController() };
  else if (parts[0] === "clusters" && parts[1]) state.view = { kind: "cluster", id: parts[1], abort: new AbortController() };
  else if (parts[0] === "clusters") state.view = { kind: "clusters" };
  else state.view = { kind: "workers" };
  const builders = { workers: buildWorkers, worker: buildWorker, clusters: buildClusters, cluster: buildCluster };
  builders[state.view.kind](view, state.view);
  refreshView();
}

function refreshView() {
  const v = state.view;
  if (!v || !$("login").hidden) return;
  if (v.kind === "workers") renderWorkers();
  else if (v.kind === "worker") renderWorker(v.id);
  else if (v.kind === "clusters") renderClusters();
  else renderCluster(v.id);
}

// ---- workers --------------------------------------------------------------

function buildWorkers(view) {
  const select = h("select", { id: "filter", onchange: (e) => { state.filter = e.target.value; renderWorkers(); } },
    h("option", { value: "" }, "all statuses"), ...STATUSES.map((s) => h("option", { value: s }, s)));
  select.value = state.filter;
  view.append(
    h("h1", {}, "Workers"),
    h("div", { class: "toolbar" }, h("label", {}, "Status ", select),
      h("span", { id: "worker-count", class: "muted" })),
    h("table", { id: "workers" },
      h("thead", {}, h("tr", {}, ...["ID", "Status", "Host / IP", "CPU", "Memory", "GPU", "Cluster", "Started",
        "Duration", "Exit", "Reason", ""].map((t) => h("th", {}, t)))),
      h("tbody", { id: "workers-body" })));
}

async function stopWorker(id, button) {
  if (!confirm(`Stop worker ${id}?`)) return;
  button.disabled = true;
  try {
    await api("api/v1/workers/stop", { method: "POST", body: JSON.stringify({ ids: [id] }) });
  } catch (e) {
    alert(`Stopping ${id} failed: ${e.message}`);
    button.disabled = false;
  }
}

// A "not enforced" mark beside a limit the worker's host does not enforce
// (w.limits, as its agent reported; the reason in the tooltip), else "".
function limitMark(w, resource) {
  const how = (w.limits || {})[resource] || "";
  if (!how.startsWith("not enforced")) return "";
  return h("span", { class: "not-enforced", title: `${resource} ${how}` }, "not enforced");
}

function renderWorkers() {
  const body = $("workers-body");
  if (!body) return;
  const rows = [...state.workers.values()]
    .filter((w) => !state.filter || w.status === state.filter)
    .sort((a, b) => (b.created_at || "").localeCompare(a.created_at || "") || a.id.localeCompare(b.id));
  body.replaceChildren(...rows.map((w) => h("tr", { "data-id": w.id },
    h("td", {}, h("a", { href: `#/workers/${encodeURIComponent(w.id)}`, class: "worker-link" }, w.id)),
    h("td", {}, statusBadge(w.status)),
    h("td", {}, w.ip_address + (w.port ? `:${w.port}` : "")),
    h("td", { class: "num" }, w.cpu, limitMark(w, "cpu")), h("td", { class: "num" }, `${w.memory} GiB`, limitMark(w, "memory")),
    h("td", { class: "num" }, w.nvidia_gpu),
    h("td", {}, w.cluster_id ? h("a", { href: `#/clusters/${encodeURIComponent(w.cluster_id)}` }, w.cluster_id) : ""),
    h("td", {}, fmtTime(w.started_at)), h("td", { class: "num duration", "data-id": w.id }, duration(w)),
    h("td", { class: "num" }, w.exit_code ?? ""), h("td", {}, w.reason || ""),
    h("td", {}, TERMINAL.has(w.status) ? "" :
      h("button", { class: "danger stop", type: "button", onclick: (e) => stopWorker(w.id, e.target) }, "Stop")))));
  $("worker-count").textContent = `${rows.length} of ${state.workers.size}`;
}

// ---- one worker -----------------------------------------------------------

function buildWorker(view, v) {
  const enc = encodeURIComponent(v.id);
  view.append(h("p", {}, h("a", { href: "#/" }, "← Workers")), h("h1", {}, `Worker ${v.id}`),
    h("table", { class: "fields", id: "worker-fields" }),
    ...curvesSection(`api/v1/workers/${enc}/metrics`, `worker-${v.id}`),
    h("h2", {}, "Log ", wholeLogLink(`api/v1/workers/${enc}/logs`)), h("pre", { id: "log", class: "log" }));
  startCurves(`api/v1/workers/${enc}/metrics`, (worker, rank) => (rank === null || rank === undefined ? "this worker" : `rank ${rank}`));
  followLog(`api/v1/workers/${enc}/logs`, $("log"), v.abort.signal,
    () => TERMINAL.has((state.workers.get(v.id) || {}).status));
}

// The log from its first byte, as the daemon streams it (a new tab; plain text).
function wholeLogLink(base) {
  return h("a", { href: `${base}?from_start=true`, target: "_blank", rel: "noopener", class: "whole-log" }, "whole log");
}

// "Training curves" with the CSV and JSON downloads and the charts' container.
function curvesSection(base, name) {
  return [h("h2", {}, "Training curves"),
    h("p", {}, h("a", { href: `${base}?format=csv`, download: `${name}-metrics.csv` }, "CSV"),
      " · ", h("a", { href: `${base}?format=json`, target: "_blank", rel: "noopener" }, "JSON")),
    h("div", { class: "charts", id: "curves" })];
}

function startCurves(base, labelOf) {
  const curves = new Curves($("curves"), labelOf);
  state.curves = curves;
  curves.render();
  api(base).then((d) => { if (state.curves === curves) curves.load(d.series || []); }).catch(() => {});
}

function fieldRows(table, pairs) {
  table.replaceChildren(...pairs.map(([k, val]) => h("tr", {}, h("th", {}, k), h("td", {}, val ?? ""))));
}

function renderWorker(id) {
  const w = state.workers.get(id);
  const table = $("worker-fields");
  if (!table) return;
  if (!w) return fieldRows(table, [["status", "unknown worker"]]);
  fieldRows(table, [["status", statusBadge(w.status)], ["host / IP", w.ip_address], ["port", w.port],
    ["script", w.script], ["kernel", w.kernel], ["cpu", h("span", {}, `${w.cpu}`, limitMark(w, "cpu"))],
    ["memory", h("span", {}, `${w.memory} GiB`, limitMark(w, "memory"))], ["gpu", w.nvidia_gpu],
    ["limits", Object.entries(w.limits || {}).map(([k, how]) => `${k} ${how}`).join("; ")],
    ["cluster", w.cluster_id ? h("a", { href: `#/clusters/${encodeURIComponent(w.cluster_id)}` }, w.cluster_id) : ""],
    ["created", fmtTime(w.created_at)], ["started", fmtTime(w.started_at)], ["finished", fmtTime(w.finished_at)],
    ["duration", duration(w)], ["exit code", w.exit_code], ["reason", w.reason],
    ["", TERMINAL.has(w.status) ? "" : h("button", { class: "danger stop", type: "button",
      onclick: (e) => stopWorker(w.id, e.target) }, "Stop")]]);
}

// Follows a log: GET <base>?follow=true streams text/plain with an
// X-Log-Offset header until the worker ends, starting with the log's last
// lines (after the daemon's "[muster] ..." line saying what came before), so
// a long log shows its end at once; a daemon that does not stream (no
// X-Log-Offset, or no follower free) is polled with ?tail=200 every second.
const MAX_LOG_CHARS = 400000;
async function followLog(base, pre, signal, isDone) {
  const show = (text, append) => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    let t = append ? pre.textContent + text : text;
    if (t.length > MAX_LOG_CHARS) t = t.slice(t.length - MAX_LOG_CHARS);
    pre.textContent = t;  // text, never markup
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  try {
    const resp = await fetch(`${base}?follow=true`, { signal, credentials: "same-origin" });
    if (resp.ok && resp.headers.get("X-Log-Offset") !== null && resp.body) {
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        show(value, true);
      }
    }
    if (resp.ok) show(await resp.text(), false);
  } catch (e) {
    if (signal.aborted) return;
  }
  let last = false;
  while (!signal.aborted && !last) {
    await new Promise((r) => setTimeout(r, 1000));
    last = isDone();
    try {
      const resp = await fetch(`${base}?tail=200`, { signal, credentials: "same-origin" });
      if (resp.ok) show(await resp.text(), false);
    } catch (e) {
      if (signal.aborted) return;
    }
  }
}

// ---- clusters -------------------------------------------------------------

function buildClusters(view) {
  view.append(h("h1", {}, "Clusters"), h("table", { id: "clusters" },
    h("thead", {}, h("tr", {}, ...["ID", "Mode", "Status", "Workers", "PS", "Gen", "Created", "Finished", "Reason"]
      .map((t) => h("th", {}, t)))),
    h("tbody", { id: "clusters-body" })));
}

function renderClusters() {
  const body = $("clusters-body");
  if (!body) return;
  const rows = [...state.clusters.values()].sort((a, b) => (b.created_at || "").localeCompare(a.created_at || ""));
  body.replaceChildren(...rows.map((c) => h("tr", { "data-id": c.id },
    h("td", {}, h("a", { href: `#/clusters/${encodeURIComponent(c.id)}`, class: "cluster-link" }, c.id)),
    h("td", {}, c.mode), h("td", {}, statusBadge(c.status)), h("td", { class: "num" }, c.n_workers),
    h("td", { class: "num" }, c.n_ps), h("td", { class: "num" }, c.generation || ""),
    h("td", {}, fmtTime(c.created_at)), h("td", {}, fmtTime(c.finished_at)),
    h("td", { class: c.status === "failed" ? "error" : "" }, c.reason || ""))));
}

function copyButton(getText) {
  return h("button", { type: "button", class: "copy", onclick: async (e) => {
    const text = getText();
    try { await navigator.clipboard.writeText(text); e.target.textContent = "Copied"; }
    catch (err) { e.target.textContent = "Copy failed"; }
    setTimeout(() => { e.target.textContent = "Copy"; }, 1500);
  } }, "Copy");
}

function buildCluster(view, v) {
  const enc = encodeURIComponent(v.id);
  view.append(h("p", {}, h("a", { href: "#/clusters" }, "← Clusters")), h("h1", {}, `Cluster ${v.id}`),
    h("div", { id: "cluster-failure", class: "failure", hidden: true }),
    h("table", { class: "fields", id: "cluster-fields" }),
    h("h2", {}, "Tasks"), h("table", { id: "cluster-tasks" }),
    h("div", { id: "cluster-generations" }),
    h("div", { id: "cluster-launch" }),
    ...curvesSection(`api/v1/clusters/${enc}/metrics`, `cluster-${v.id}`),
    h("div", { id: "cluster-spec" }),
    h("h2", {}, "Launcher log ", wholeLogLink(`api/v1/clusters/${enc}/logs`)), h("pre", { id: "log", class: "log" }));
  // A line per rank (mpi: every rank reports through worker 0) or per task (ps: "worker 1").
  startCurves(`api/v1/clusters/${enc}/metrics`, (worker, rank) => {
    if (rank !== null && rank !== undefined) return `rank ${rank}`;
    const c = state.clusters.get(v.id) || {};
    for (const [type, ids] of Object.entries(c.workers || {})) {
      const i = (ids || []).indexOf(worker);
      if (i >= 0) return `${type} ${i}`;
    }
    return worker;
  });
  followLog(`api/v1/clusters/${enc}/logs`, $("log"), v.abort.signal,
    () => TERMINAL.has((state.clusters.get(v.id) || {}).status));
}

// A cluster's generations: each world (elastic) or run (max_restarts), who
// died and why, who replaced whom, how long the recovery into it took and
// how many batches it redid.
function renderGenerations(c) {
  const gens = c.generations || [];
  const secs = (x) => (x === null || x === undefined ? "" : `${x.toFixed(2)} s`);
  const workerLink = (wid) => h("a", { href: `#/workers/${encodeURIComponent(wid)}` }, wid);
  const rows = gens.map((g) => {
    const by = new Map((g.replacements || []).map((r) => [r.replaced, r.by]));
    const deaths = (g.deaths || []).map((d) => h("div", {}, `${d.task} (`, workerLink(d.worker_id), `) ${d.reason} at ${fmtTime(d.at)}`,
      ...(by.has(d.worker_id) ? [" — replaced by ", workerLink(by.get(d.worker_id))] : [])));
    return h("tr", { "data-generation": g.generation }, h("td", { class: "num" }, g.generation), h("td", {}, g.cause),
      h("td", { class: "num" }, (g.members || []).length), h("td", {}, fmtTime(g.started_at)), h("td", {}, fmtTime(g.ended_at)),
      h("td", { class: "num" }, secs(g.recovery_seconds)), h("td", { class: "num" }, secs(g.resume_seconds)),
      h("td", { class: "num" }, g.batches_redone ?? ""), h("td", {}, g.end_reason || "", ...deaths));
  });
  const title = c.mode === "elastic"
    ? `Generations (${c.resets || 0} resets; min_np ${c.min_np}, max_np ${c.max_np})`
    : `Generations (${c.restarts || 0} of ${c.max_restarts || 0} restarts)`;
  // What happened, as it happens: the daemon's events (deaths, re-formations, restarts), newest last.
  const events = (c.events || []).map((e) => h("li", { "data-kind": e.kind }, `${fmtTime(e.at)} ${e.text}`));
  $("cluster-generations").replaceChildren(...(events.length ? [h("h2", {}, "Events"),
    h("ul", { id: "cluster-events" }, ...events)] : []),
  ...(gens.length ? [h("h2", {}, title), h("table", { id: "generations" },
    h("thead", {}, h("tr", {}, ...["Gen", "Cause", "Ranks", "Started", "Ended", "Recovery", "First step", "Redone",
      "Why it ended"].map((t) => h("th", {}, t)))), h("tbody", {}, ...rows))] : []));
}

function renderCluster(id) {
  const c = state.clusters.get(id);
  const table = $("cluster-fields");
  if (!table) return;
  if (!c) return fieldRows(table, [["status", "unknown cluster"]]);
  const failure = $("cluster-failure");
  failure.hidden = !(c.status === "failed" && c.reason);
  // A failed cluster names the rank whose failure came first (its exception in
  // the reason, the ranks that then failed after it); its last lines show below.
  const rank = c.status === "failed" ? c.failed_rank : null;
  failure.replaceChildren(...(c.status === "failed" ? [h("div", {}, `Failed: ${c.reason}`)] : []),
    ...(rank && rank.log_tail && rank.log_tail.length
      ? [h("div", {}, `Last lines of rank ${rank.rank}:`), h("pre", { class: "json", id: "failed-rank-tail" },
        rank.log_tail.join("\n"))] : []));
  fieldRows(table, [["mode", c.mode], ["status", statusBadge(c.status)], ["workers", c.n_workers], ["ps", c.n_ps],
    ["created", fmtTime(c.created_at)], ["finished", fmtTime(c.finished_at)],
    ["launcher exit code", c.launcher_exit_code], ["reason", c.reason]]);
  const tasks = [];
  for (const [type, ids] of Object.entries(c.workers || {})) {
    ids.forEach((wid, index) => {
      const w = state.workers.get(wid) || {};
      tasks.push(h("tr", {}, h("td", {}, type), h("td", { class: "num" }, index),
        h("td", {}, h("a", { href: `#/workers/${encodeURIComponent(wid)}` }, wid)),
        h("td", {}, w.status ? statusBadge(w.status) : ""), h("td", {}, (w.ip_address || "") + (w.port ? `:${w.port}` : "")),
        h("td", { class: "num" }, w.exit_code ?? ""), h("td", {}, w.reason || "")));
    });
  }
  $("cluster-tasks").replaceChildren(h("thead", {}, h("tr", {}, ...["Task", "Index", "Worker", "Status", "Address",
    "Exit", "Reason"].map((t) => h("th", {}, t)))), h("tbody", {}, ...tasks));
  renderGenerations(c);
  const launch = [];
  for (const [key, label] of [["horovodrun_command", "horovodrun"], ["mpirun_command", "mpirun"],
    ["torchrun_command", "torchrun"]]) {
    if (!c[key]) continue;
    launch.push(h("h3", {}, label), h("div", { class: "cmd" }, h("pre", { class: "json", id: `cmd-${label}` }, c[key]),
      copyButton(() => c[key])));
  }
  $("cluster-launch").replaceChildren(...(launch.length ? [h("h2", {}, "Launch lines"), ...launch] : []));
  const spec = [];
  if (c.cluster_spec && Object.keys(c.cluster_spec).length) {
    const tf = { cluster: c.cluster_spec, task: { type: c.cluster_spec.chief ? "chief" : "worker", index: 0 } };
    spec.push(h("h2", {}, "ClusterSpec"), h("pre", { class: "json" }, JSON.stringify(c.cluster_spec, null, 2)),
      h("h2", {}, "TF_CONFIG (task 0; each task gets its own type and index)"),
      h("div", { class: "cmd" }, h("pre", { class: "json" }, JSON.stringify(tf)), copyButton(() => JSON.stringify(tf))));
  }
  if (c.hostfile) spec.push(h("h2", {}, "Hostfile"), h("pre", { class: "json" }, c.hostfile));
  $("cluster-spec").replaceChildren(...spec);
}

start();
