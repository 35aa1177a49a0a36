/* ragpulse dashboard: one page, hash routes, everything drawn from the read-only JSON API.
 *
 * The same script renders `ragpulse report`: there the data is embedded in the page
 * (window.RAGPULSE_REPORT) and nothing is fetched. Text from spans is untrusted: it only ever
 * reaches the page as text nodes (see `h`), never as HTML.
 */
"use strict";

const REPORT = window.RAGPULSE_REPORT || null;
const RANGES = ["15m", "1h", "6h", "24h", "7d", "30d"];
const PALETTE = ["#3654d1", "#e4572e", "#17a398", "#f2a541", "#8e44ad", "#2e86ab", "#c0392b",
  "#27ae60", "#7f8c8d", "#d35400", "#16a085", "#9b59b6"];

// ---------------------------------------------------------------- DOM and formatting

/** An element with attributes and children; strings become text nodes (never parsed as HTML). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A time from the API (UTC, ISO 8601, with or without an offset) as a Date. */
function parseTime(text) {
  if (!text) return null;
  let s = String(text).replace(" ", "T").replace(/(\.\d{3})\d+/, "$1");
  if (!/[zZ]|[+-]\d\d:?\d\d$/.test(s)) s += "Z";
  const d = new Date(s);
  return isNaN(d) ? null : d;
}

/** In the browser's time zone. */
function fmtTime(text) {
  const d = parseTime(text);
  return d ? d.toLocaleString([], { dateStyle: "short", timeStyle: "medium" }) : "—";
}

function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (Number.isInteger(v)) return v.toLocaleString();
  return Number(v).toLocaleString([], { maximumFractionDigits: digits });
}

function fmtPct(v) { return v === null || v === undefined ? "—" : `${(v * 100).toFixed(1)} %`; }
function axisPct(v) { return `${Math.round(v * 100)} %`; }
function fmtMs(v) {
  if (v === null || v === undefined) return "—";
  return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Math.round(v)} ms`;
}
function fmtUsd(v) { return v === null || v === undefined ? "—" : `$${v.toFixed(v < 1 ? 4 : 2)}`; }
function badge(text) { return h("span", { class: `badge ${text || "none"}` }, text || "—"); }

function epoch(text) { const d = parseTime(text); return d ? d.getTime() / 1000 : null; }

// ---------------------------------------------------------------- state: the URL hash

function route() {
  const raw = location.hash.replace(/^#/, "") || "/overview";
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "") };
}

function go(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") query.set(k, v);
  const text = query.toString();
  location.hash = `#${path}${text ? "?" + text : ""}`;
}

// Time range and service, shared by every page (kept in sessionStorage, shown in the bar).
const scope = {
  get since() { return sessionStorage.getItem("ragpulse.since") || "24h"; },
  set since(v) { sessionStorage.setItem("ragpulse.since", v); },
  get service() { return sessionStorage.getItem("ragpulse.service") || ""; },
  set service(v) { sessionStorage.setItem("ragpulse.service", v); },
};

// ---------------------------------------------------------------- the API

class ApiError extends Error {}

async function api(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") query.set(k, v);
  const url = `/api/${path}${query.toString() ? "?" + query : ""}`;
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" } });
  } catch (exc) {
    throw new ApiError(`cannot reach ragpulse (${url}): ${exc.message}`);
  }
  let body = null;
  try { body = await response.json(); } catch (_) { /* reported below */ }
  if (!response.ok) {
    throw new ApiError(`${url}: ${response.status} ${(body && body.error) || response.statusText}`);
  }
  return body;
}

// ---------------------------------------------------------------- charts (uPlot)

const pendingCharts = [];

/** A chart box; the chart is drawn once the box is on the page (uPlot needs its width). */
function chart(title, xs, series, options = {}) {
  const box = h("div", { class: "panel chart", "data-chart": title }, h("h3", {}, title));
  if (!xs.length || !series.length || series.every((s) => s.values.every((v) => v === null || v === undefined))) {
    append(box, [h("p", { class: "muted" }, "No data in this window.")]);
    return box;
  }
  pendingCharts.push(() => {
    const width = Math.max(300, box.clientWidth - 32);
    // One point alone would stretch the axis over years: show the hour around it.
    const xRange = options.x || (xs.length === 1 ? [xs[0] - 1800, xs[0] + 1800] : null);
    const opts = {
      width, height: 200,
      scales: {
        x: xRange ? { time: true, range: xRange } : { time: true },
        y: options.range ? { range: options.range } : { auto: true },
      },
      axes: [{}, { size: 64, values: (u, ticks) => ticks.map(options.axis || options.tick || ((v) => fmtNum(v, 2))) }],
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: 2,
        // Points as well as lines: a score sampled in few buckets still shows.
        points: { show: true, size: 4 }, spanGaps: false,
      }))],
      legend: { live: false },
    };
    new uPlot(opts, [xs, ...series.map((s) => s.values)], box);
  });
  return box;
}

function drawCharts() {
  while (pendingCharts.length) pendingCharts.shift()();
}

/** Rows of (t, name, field) pivoted onto every bucket of the window: a series per name, null
 * where a bucket has no row (a gap, never a line across it). */
function pivot(buckets, rows, field) {
  const at = new Map(buckets.map((t, i) => [epoch(t), i]));
  // Scores with no value in the window (all skipped) would only crowd the legend.
  const names = [...new Set(rows.filter((r) => r[field] !== null && r[field] !== undefined).map((r) => r.name))].sort();
  const index = new Map(names.map((n, i) => [n, i]));
  const series = names.map((name, i) => ({ label: name, color: PALETTE[i % PALETTE.length], values: buckets.map(() => null) }));
  for (const r of rows) {
    const i = at.get(epoch(r.t));
    if (index.has(r.name) && i !== undefined) series[index.get(r.name)].values[i] = r[field];
  }
  return series;
}

/** One column of the traffic rows on every bucket; `empty` where a bucket had no trace. */
function column(buckets, rows, field, empty) {
  const byTime = new Map(rows.map((r) => [epoch(r.t), r]));
  return buckets.map((t) => { const r = byTime.get(epoch(t)); return r ? r[field] : empty; });
}

// ---------------------------------------------------------------- page chrome

function renderChrome(active, services) {
  const nav = document.getElementById("nav");
  nav.replaceChildren(...[["overview", "Overview"], ["traces", "Traces"], ["alerts", "Alerts"]].map(([key, label]) =>
    h("a", { href: `#/${key}`, class: active === key ? "active" : null }, label)));
  const controls = document.getElementById("controls");
  const range = h("select", { id: "range", title: "Time range",
    onchange: (e) => { scope.since = e.target.value; rescoped(); } },
    RANGES.map((r) => h("option", { value: r, selected: r === scope.since }, `last ${r}`)));
  const known = new Set(services || []);
  if (scope.service) known.add(scope.service);
  const service = h("select", { id: "service", title: "Service",
    onchange: (e) => { scope.service = e.target.value; rescoped(); } },
    h("option", { value: "" }, "every service"),
    [...known].sort().map((s) => h("option", { value: s, selected: s === scope.service }, s)));
  controls.replaceChildren(range, service);
}

/** After a change of time range or service: the same page from its first page of results. */
function rescoped() {
  const { parts, params } = route();
  if (!params.has("offset")) { render(); return; }
  params.delete("offset");
  go(`/${parts.join("/")}`, Object.fromEntries(params.entries()));
}

function errorBanner(exc) {
  const what = exc instanceof ApiError ? "The API answered with an error: " : "The page failed: ";
  return h("div", { class: "banner err", role: "alert" }, h("b", {}, what), exc.message);
}

function emptyState() {
  const host = location.host || "127.0.0.1:4318";
  return h("div", { class: "panel empty" },
    h("h2", {}, `No traces in the last ${scope.since}${scope.service ? " for " + scope.service : ""}`),
    h("p", {}, "Point your app's OpenTelemetry exporter at ragpulse, or pick a longer time range above."),
    h("pre", {}, [
      `export OTEL_EXPORTER_OTLP_ENDPOINT=http://${host} OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`,
      "export OTEL_SERVICE_NAME=my-rag-app",
      "# or OTLP/gRPC: the same host on receivers.grpc_port (4317 by default), OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
      "",
      "# or see it with the example app's data:",
      "ragpulse demo --serve",
    ].join("\n")));
}

// ---------------------------------------------------------------- overview

function overviewView(o, regressions) {
  const out = [];
  if (o.firing_alerts.length) {
    out.push(h("div", { class: "banner alert", role: "alert" },
      h("b", {}, `${o.firing_alerts.length} alert${o.firing_alerts.length > 1 ? "s" : ""} firing: `),
      o.firing_alerts.map((a, i) => [i ? ", " : "", h("a", { href: REPORT ? "#report-alerts" : "#/alerts" }, a.alert),
        ` (${a.service_name || "every service"}: ${a.condition || a.score || ""}, now ${fmtNum(a.value)})`])));
  }
  const t = o.totals;
  const kpi = (label, value) => h("div", { class: "kpi" }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
  out.push(h("div", { class: "kpis" },
    kpi("traces", fmtNum(t.traces)),
    kpi("trace errors", fmtNum(t.errors)),
    kpi("p50 latency", fmtMs(t.p50_ms)),
    kpi("p95 latency", fmtMs(t.p95_ms)),
    kpi("judge calls", fmtNum(o.judge.calls)),
    kpi("judge errors", fmtNum(o.judge.errors)),
    kpi("judge tokens (in / out)", `${fmtNum(o.judge.input_tokens)} / ${fmtNum(o.judge.output_tokens)}`),
    kpi("judge cost", judgeCost(o.judge))));

  out.push(h("h2", {}, "Scores"));
  out.push(h("table", { id: "score-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "score"), h("th", { class: "num" }, "n"), h("th", { class: "num" }, "mean"),
      h("th", { class: "num" }, "pass rate"), h("th", { class: "num" }, "error rate"), h("th", { class: "num" }, "fail"),
      h("th", { class: "num" }, "skipped"), h("th", {}, ""))),
    h("tbody", {}, o.scores.map((s) => h("tr", {},
      h("td", {}, s.name), h("td", { class: "num" }, fmtNum(s.n)), h("td", { class: "num" }, fmtNum(s.mean)),
      h("td", { class: "num" }, fmtPct(s.pass_rate)), h("td", { class: "num" }, fmtPct(s.error_rate)),
      h("td", { class: "num" }, fmtNum(s.n_fail)), h("td", { class: "num" }, fmtNum(s.n_skipped)),
      h("td", {}, s.n_fail + s.n_error > 0 && !REPORT ? h("a", { href: `#/traces?failing=${encodeURIComponent(s.name)}` }, "failing traces") : ""))))));

  if (regressions) out.push(regressions instanceof Node ? regressions : regressionsView(regressions));

  const xs = o.buckets.map(epoch);
  const col = (field, empty = null) => column(o.buckets, o.traffic, field, empty);
  // The whole window on the x axis, so the charts line up and a quiet stretch shows as such.
  const x = [Math.min(xs[0], epoch(o.window.start)), epoch(o.window.end)];
  const minutes = Math.round(o.bucket_seconds / 60);
  out.push(h("h2", {}, "Trends"));
  out.push(h("div", { class: "charts" },
    chart("Score means", xs, pivot(o.buckets, o.score_series, "mean"), { range: [0, 1], x }),
    chart("Pass rates", xs, pivot(o.buckets, o.score_series, "pass_rate"), { range: [0, 1], tick: fmtPct, axis: axisPct, x }),
    chart("Error rates", xs, pivot(o.buckets, o.score_series, "error_rate"), { range: [0, 1], tick: fmtPct, axis: axisPct, x }),
    chart(`Traffic (traces per ${minutes} min)`, xs, [{ label: "traces", values: col("traces", 0) }, { label: "errors", values: col("errors", 0), color: "#c2352b" }], { x }),
    chart("Latency", xs, [
      { label: "p50", values: col("p50_ms") }, { label: "p95", values: col("p95_ms") },
      { label: "retrieval (mean)", values: col("retrieval_ms") }, { label: "generation (mean)", values: col("generation_ms") }],
      { tick: fmtMs, x })));

  out.push(h("h2", {}, "Services"));
  out.push(h("table", { id: "service-table" },
    h("thead", {}, h("tr", {}, ["service", "traces", "errors", "p50", "p95", "retrieval", "generation", "input tokens", "output tokens"]
      .map((c, i) => h("th", { class: i ? "num" : null }, c)))),
    h("tbody", {}, o.services.filter((s) => !o.service || s.service_name === o.service).map((s) => h("tr", {},
      h("td", {}, s.service_name || "—"), h("td", { class: "num" }, fmtNum(s.traces)), h("td", { class: "num" }, fmtNum(s.errors)),
      h("td", { class: "num" }, fmtMs(s.p50_ms)), h("td", { class: "num" }, fmtMs(s.p95_ms)),
      h("td", { class: "num" }, fmtMs(s.retrieval_ms)), h("td", { class: "num" }, fmtMs(s.generation_ms)),
      h("td", { class: "num" }, fmtNum(s.input_tokens)), h("td", { class: "num" }, fmtNum(s.output_tokens)))))));
  return out;
}

/** The judge's cost, or what is missing to know it. */
function judgeCost(judge) {
  if (judge.cost_usd !== null && judge.cost_usd !== undefined) return fmtUsd(judge.cost_usd);
  return judge.calls ? "set judge prices" : "—";
}

function regressionsView(r) {
  const flagged = r.comparisons.filter((c) => c.status === "regressed");
  const tested = r.comparisons.filter((c) => c.status !== "insufficient").length;
  return h("div", { class: "panel", id: "regressions", "data-state": "done" },
    h("h3", {}, `Regressions against ${fmtTime(r.baseline.start)} – ${fmtTime(r.baseline.end)}`),
    flagged.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["service", "score", "figure", "before", "now", "change", "p"].map((c) => h("th", {}, c)))),
        h("tbody", {}, flagged.map((c) => h("tr", {}, h("td", {}, c.service || "—"), h("td", {}, c.score), h("td", {}, c.metric),
          h("td", { class: "num" }, fmtNum(c.baseline)), h("td", { class: "num" }, fmtNum(c.recent)),
          h("td", { class: "num" }, fmtNum(c.effect)), h("td", { class: "num" }, fmtNum(c.p_value, 4))))))
      : h("p", { class: "muted" }, tested
        ? `No regression: ${tested} comparisons, none significantly worse.`
        : "Not enough scores in both windows to compare."));
}

/** The regressions panel: drawn when its (slower) answer arrives, so the overview does not wait. */
function regressionsPanel(params) {
  const panel = h("div", { class: "panel", id: "regressions", "data-state": "loading" },
    h("h3", {}, "Regressions"), h("p", { class: "muted" }, "Comparing with the window before…"));
  api("regressions", params).then(
    (r) => panel.replaceWith(regressionsView(r)),
    (exc) => { panel.replaceChildren(errorBanner(exc)); panel.dataset.state = "error"; });
  return panel;
}

async function overviewPage() {
  const params = { since: scope.since, service: scope.service };
  const o = await api("overview", params);
  const main = [h("h1", {}, "Overview")];
  if (!o.totals.traces && !o.scores.length) main.push(emptyState());
  else main.push(...overviewView(o, regressionsPanel(params)));
  return { chrome: ["overview", o.services.map((s) => s.service_name)], content: main };
}

// ---------------------------------------------------------------- traces

function tracesTable(traces, sortable) {
  const sortHeader = (key, label) => {
    if (!sortable) return h("th", { class: key === "start_time" ? null : "num" }, label);
    const active = sortable.sort === key;
    const next = active && sortable.order === "desc" ? "asc" : "desc";
    return h("th", { class: `sortable ${key === "start_time" ? "" : "num"}`, "data-sort": key,
      onclick: () => sortable.onSort(key, next) }, label, active ? (sortable.order === "desc" ? " ▼" : " ▲") : "");
  };
  return h("div", { class: "scroll" }, h("table", { id: "trace-table" },
    h("thead", {}, h("tr", {}, sortHeader("start_time", "start"), h("th", {}, "service"), h("th", {}, "question"),
      h("th", {}, "answer"), sortHeader("duration_ms", "duration"), h("th", {}, "status"), h("th", {}, "sampled"),
      sortHeader("worst", "lowest score"), h("th", {}, "failing"))),
    h("tbody", {}, traces.map((t) => h("tr", { class: "link", "data-trace": t.trace_id, "data-duration": t.duration_ms,
      onclick: () => { if (REPORT) location.hash = `#trace-${t.trace_id}`; else go(`/trace/${t.trace_id}`); } },
      h("td", { class: "nowrap" }, fmtTime(t.start_time)), h("td", { class: "nowrap" }, t.service_name || "—"),
      h("td", { class: "clip", title: t.question || "" }, t.question || "—"),
      h("td", { class: "clip", title: t.answer || "" }, t.answer || "—"),
      h("td", { class: "num" }, fmtMs(t.duration_ms)), h("td", {}, badge(t.status)),
      h("td", {}, t.sample_decision || "—"), h("td", { class: "num" }, fmtNum(t.worst)),
      h("td", { class: "failing", title: (t.failing || []).join(", ") }, failingChips(t.failing || [])))))));
}

/** The failed scores of a trace: the first few as chips, then how many more. */
function failingChips(names, shown = 2) {
  return [names.slice(0, shown).map((n) => h("span", { class: "chip" }, n)),
    names.length > shown ? h("span", { class: "muted" }, ` +${names.length - shown}`) : null];
}

// The services and score names of the current time range and service, for the filters of the
// trace list; kept for a minute, so paging and sorting do not ask for the overview again.
let scopeInfoCache = null;

async function scopeInfo() {
  const key = `${scope.since}|${scope.service}`;
  if (scopeInfoCache && scopeInfoCache.key === key && Date.now() - scopeInfoCache.at < 60_000) return scopeInfoCache;
  const o = await api("overview", { since: scope.since, service: scope.service });
  scopeInfoCache = { key, at: Date.now(), services: o.services.map((s) => s.service_name), names: o.scores.map((s) => s.name) };
  return scopeInfoCache;
}

async function tracesPage(params) {
  const filters = Object.fromEntries(params.entries());
  const query = { since: scope.since, service: scope.service, limit: 50, ...filters };
  const [info, page] = await Promise.all([scopeInfo(), api("traces", query)]);
  const names = info.names;
  const set = (changes) => go("/traces", { ...filters, offset: null, ...changes });
  // A filter from the URL on a score this window does not have stays visible (and selected).
  const choices = (name) => [["", name === "score" ? "—" : "any"],
    ...[...new Set([...names, ...(filters[name] ? [filters[name]] : [])])].sort().map((n) => [n, n])];
  const select = (name, label, options) => h("label", {}, label,
    h("select", { name, onchange: (e) => set({ [name]: e.target.value }) },
      options.map(([value, text]) => h("option", { value, selected: (filters[name] || "") === value }, text))));
  const belowInput = h("input", { name: "below", type: "number", step: "any", min: "0", max: "1", value: filters.below || "", placeholder: "0.5", style: "width:80px" });
  const textInput = h("input", { name: "q", type: "search", value: filters.q || "", placeholder: "question or answer text" });
  const form = h("form", { class: "filters", id: "trace-filters",
    onsubmit: (e) => {
      e.preventDefault();
      const score = e.target.elements.score.value;
      set({ q: textInput.value, score: score, below: score ? (belowInput.value || "0.5") : "" });
    } },
    select("status", "status", [["", "any"], ["ok", "ok"], ["error", "error"]]),
    select("failing", "failing evaluator", choices("failing")),
    h("label", {}, "score", h("select", { name: "score" }, choices("score")
      .map(([value, text]) => h("option", { value, selected: (filters.score || "") === value }, text)))),
    h("label", {}, "below", belowInput),
    h("label", {}, "text", textInput),
    h("button", { type: "submit" }, "Apply"),
    Object.keys(filters).length ? h("button", { type: "button", onclick: () => go("/traces", {}) }, "Clear") : null);

  const out = [h("h1", {}, "Traces"), form];
  const chrome = ["traces", info.services];
  if (!page.total && !Object.keys(filters).length && !info.services.length) {
    out.push(emptyState());
    return { chrome, content: out };
  }
  const from = page.traces.length ? page.offset + 1 : 0;
  const to = page.offset + page.traces.length;
  out.push(h("p", { class: "muted", id: "trace-count" }, page.traces.length || !page.offset
    ? `${fmtNum(from)}–${fmtNum(to)} of ${fmtNum(page.total)} traces`
    : `Past the last page: ${fmtNum(page.total)} traces in all.`));
  if (page.traces.length) {
    out.push(tracesTable(page.traces, {
      sort: filters.sort || "start_time", order: filters.order || "desc",
      onSort: (sort, order) => set({ sort, order }),
    }));
  } else if (page.offset) {
    out.push(h("button", { id: "first", onclick: () => set({}) }, "Back to the first page"));
  } else {
    out.push(h("div", { class: "panel empty" }, "No trace matches these filters."));
  }
  out.push(h("div", { class: "pager" },
    h("button", { id: "prev", disabled: page.offset === 0, onclick: () => set({ offset: Math.max(0, page.offset - page.limit) || null }) }, "← newer"),
    h("button", { id: "next", disabled: to >= page.total, onclick: () => set({ offset: page.offset + page.limit }) }, "older →")));
  return { chrome, content: out };
}

// ---------------------------------------------------------------- one trace

function traceView(d) {
  const t = d.trace;
  const out = [];
  out.push(h("div", { class: "meta" },
    h("span", {}, "service ", h("b", {}, t.service_name || "—")),
    h("span", {}, "started ", h("b", {}, fmtTime(t.start_time))),
    h("span", {}, "duration ", h("b", {}, fmtMs(t.duration_ms))),
    h("span", {}, "status ", badge(t.status)),
    h("span", {}, "convention ", h("b", {}, t.convention || "—")),
    h("span", {}, "tokens ", h("b", {}, `${fmtNum(t.input_tokens)} in / ${fmtNum(t.output_tokens)} out`)),
    h("span", {}, "sampled ", h("b", {}, `${t.sample_decision || "—"}`), t.sample_reason ? ` (${t.sample_reason})` : ""),
    h("span", {}, "judge ", h("b", {}, t.judge_status || "—")),
    t.case_id ? h("span", {}, "case ", h("b", {}, t.case_id)) : null,
    h("span", {}, "trace ", h("code", {}, t.trace_id))));
  out.push(h("div", { class: "panel qa" },
    h("div", { class: "k" }, "question"), h("div", { class: "question" }, t.question || "—"),
    h("div", { class: "k" }, "answer"), h("div", { class: "answer" }, t.answer || "—"),
    t.expected_answer ? [h("div", { class: "k" }, "expected"), h("div", {}, t.expected_answer)] : null,
    t.mapping_error ? [h("div", { class: "k" }, "mapping error"), h("div", {}, t.mapping_error)] : null));

  out.push(h("h2", {}, "Steps"));
  out.push(timeline(t, d.steps));
  out.push(h("h2", {}, "Documents"));
  out.push(documentsView(d.documents));
  out.push(h("h2", {}, "Scores"));
  out.push(scoresView(d.scores));
  return out;
}

function timeline(t, steps) {
  if (!steps.length) return h("p", { class: "muted" }, "No RAG step was mapped from this trace's spans.");
  const start = parseTime(t.start_time).getTime();
  const total = Math.max(1, t.duration_ms || 1);
  return h("div", { class: "panel timeline" }, steps.map((s) => {
    const offset = s.start_time ? (parseTime(s.start_time).getTime() - start) : 0;
    const left = Math.min(100, Math.max(0, (offset / total) * 100));
    const width = Math.max(0.3, Math.min(100 - left, ((s.duration_ms || 0) / total) * 100));
    const kind = ["retrieval", "rerank", "llm", "tool", "embedding"].includes(s.kind) ? s.kind : "other";
    const tokens = s.input_tokens || s.output_tokens ? ` · ${fmtNum(s.input_tokens)}/${fmtNum(s.output_tokens)} tok` : "";
    return h("div", { class: "row" },
      h("div", { class: "clip", title: s.name || "" }, h("b", {}, s.kind), " ", s.name || "", s.model ? ` (${s.model})` : ""),
      h("div", { class: "track" }, h("div", { class: `span k-${kind}`, style: `left:${left}%;width:${width}%` })),
      h("div", { class: "num muted" }, fmtMs(s.duration_ms), tokens, s.status === "error" ? " · error" : ""));
  }));
}

function documentsView(documents) {
  if (!documents.length) return h("p", { class: "muted" }, "No documents were retrieved in this trace.");
  const mark = (e) => (e === true ? h("span", { class: "badge pass" }, "expected") : e === false ? h("span", { class: "badge skipped" }, "not expected") : "—");
  return h("table", { class: "documents" },
    h("thead", {}, h("tr", {}, h("th", {}, "stage"), h("th", { class: "num" }, "rank"), h("th", {}, "id"),
      h("th", { class: "num" }, "score"), h("th", {}, "expected"), h("th", {}, "content"))),
    h("tbody", {}, documents.map((doc) => h("tr", {},
      h("td", {}, doc.stage), h("td", { class: "num" }, doc.rank), h("td", {}, h("code", {}, doc.doc_id || "—")),
      h("td", { class: "num" }, fmtNum(doc.score)), h("td", {}, mark(doc.expected)),
      h("td", {}, (doc.content || "").length > 160
        ? h("details", {}, h("summary", {}, `${doc.content.slice(0, 160)}…`), h("pre", {}, doc.content))
        : doc.content || "—")))));
}

function scoresView(scores) {
  if (!scores.length) return h("p", { class: "muted" }, "No scores: the trace was not sampled, or its scoring is pending.");
  // Failed and errored scores open, the rest one line each: what went wrong is seen first.
  const order = { fail: 0, error: 1, pass: 2, skipped: 3 };
  const sorted = [...scores].sort((a, b) => (order[a.status] ?? 4) - (order[b.status] ?? 4) || a.name.localeCompare(b.name));
  return h("div", { class: "scores" }, sorted.map((s) => {
    const judged = s.evaluator === "judge";
    const items = s.items || [];
    const threshold = s.threshold !== null && s.threshold !== undefined ? ` · threshold ${fmtNum(s.threshold)}` : "";
    return h("details", { class: "panel score", "data-score": s.name, open: s.status === "fail" || s.status === "error" },
      h("summary", {}, h("b", {}, s.name), " ", badge(s.status), " ",
        h("span", { class: "muted" }, `value ${fmtNum(s.value)}${threshold}${s.label ? ` · ${s.label}` : ""} · ${s.evaluator}`)),
      s.explanation ? h("p", {}, s.explanation) : null,
      items.length ? h("ul", { class: "claims" }, items.map((item) => h("li", { class: item.ok ? "ok" : "bad" },
        h("span", { class: `badge ${item.ok ? "pass" : "fail"}` }, item.ok ? "✓" : "✗"), " ", item.text,
        item.evidence ? h("div", { class: "evidence" }, `“${item.evidence}”`) : null))) : null,
      judged ? h("p", { class: "muted provenance" },
        `judge ${s.judge_model || "—"}${s.judge_provider ? ` (${s.judge_provider})` : ""} · prompt ${s.prompt_version || "—"} · `
        + `${fmtNum(s.judge_input_tokens)} in / ${fmtNum(s.judge_output_tokens)} out tokens · ${fmtMs(s.latency_ms)}`) : null);
  }));
}

async function tracePage(traceId) {
  const d = await api(`traces/${encodeURIComponent(traceId)}`);
  return { chrome: ["traces", []], content: [h("h1", {}, "Trace"), ...traceView(d)] };
}

// ---------------------------------------------------------------- alerts and canaries

function alertsView(a) {
  const out = [];
  out.push(h("h2", {}, "Alerts"));
  out.push(a.alerts.length ? h("table", { id: "alerts" },
    h("thead", {}, h("tr", {}, ["alert", "service", "state", "severity", "score", "condition", "value", "n", "since", "evaluated"].map((c) => h("th", {}, c)))),
    h("tbody", {}, a.alerts.map((r) => h("tr", {}, h("td", {}, r.alert), h("td", {}, r.service_name || "every service"),
      h("td", {}, badge(r.state)), h("td", {}, badge(r.severity)), h("td", {}, r.score || "—"), h("td", {}, r.condition || "—"),
      h("td", { class: "num" }, fmtNum(r.value)), h("td", { class: "num" }, fmtNum(r.n)),
      h("td", {}, fmtTime(r.started_at)), h("td", {}, fmtTime(r.evaluated_at))))))
    : h("div", { class: "panel empty" }, h("p", {}, "No alert has been evaluated yet."),
      h("p", { class: "muted" }, "Alerts are rules under monitoring.alerts in ragpulse.yaml, for example:"),
      h("pre", {}, "monitoring:\n  alerts:\n    - {name: recall-drop, score: retrieval.recall@5, min: 0.8, window: 600}")));
  out.push(h("h2", {}, "History"));
  out.push(a.events.length ? h("table", { id: "alert-events" },
    h("thead", {}, h("tr", {}, ["time", "alert", "service", "state", "severity", "value", "n", "message"].map((c) => h("th", {}, c)))),
    h("tbody", {}, a.events.map((e) => h("tr", {}, h("td", {}, fmtTime(e.time)), h("td", {}, e.alert), h("td", {}, e.service_name || "—"),
      h("td", {}, badge(e.state)), h("td", {}, e.severity || "—"), h("td", { class: "num" }, fmtNum(e.value)),
      h("td", { class: "num" }, fmtNum(e.n)), h("td", {}, e.message || "")))))
    : h("p", { class: "muted" }, "No alert has fired or resolved yet."));
  out.push(h("h2", {}, "Judge canaries"));
  if (!a.canary_runs.length) {
    out.push(h("p", { class: "muted" }, "No canary run yet (monitoring.canaries re-judges calibration pairs on a schedule to catch judge drift)."));
    return out;
  }
  const runs = [...a.canary_runs].reverse();
  out.push(h("div", { class: "charts" }, chart("Canary accuracy", runs.map((r) => epoch(r.started_at)),
    [{ label: "accuracy", values: runs.map((r) => r.accuracy) }, { label: "shift", values: runs.map((r) => r.shift), color: "#e4572e" }],
    { range: [-1, 1] })));
  out.push(h("table", { id: "canary-runs" },
    h("thead", {}, h("tr", {}, ["started", "model", "status", "pairs", "correct", "errors", "accuracy", "pass share", "shift"].map((c) => h("th", {}, c)))),
    h("tbody", {}, a.canary_runs.map((r) => h("tr", {}, h("td", {}, fmtTime(r.started_at)), h("td", {}, r.judge_model || "—"),
      h("td", {}, badge(r.status)), h("td", { class: "num" }, fmtNum(r.pairs)), h("td", { class: "num" }, fmtNum(r.correct)),
      h("td", { class: "num" }, fmtNum(r.errors)), h("td", { class: "num" }, fmtPct(r.accuracy)),
      h("td", { class: "num" }, fmtPct(r.pass_share)), h("td", { class: "num" }, fmtNum(r.shift)))))));
  return out;
}

async function alertsPage() {
  const a = await api("alerts");
  return { chrome: ["alerts", []], content: [h("h1", {}, "Alerts and canaries"), ...alertsView(a)] };
}

// ---------------------------------------------------------------- the router

let renderCount = 0;

async function render() {
  const ticket = ++renderCount;
  const { parts, params } = route();
  const main = document.getElementById("main");
  let page;
  try {
    if (parts[0] === "traces") page = await tracesPage(params);
    else if (parts[0] === "trace" && parts[1]) page = await tracePage(parts[1]);
    else if (parts[0] === "alerts") page = await alertsPage();
    else page = await overviewPage();
  } catch (exc) {
    if (!(exc instanceof ApiError)) console.error(exc);
    const active = { trace: "traces", traces: "traces", alerts: "alerts" }[parts[0]] || "overview";
    page = { chrome: [active, []], content: [errorBanner(exc)] };
  }
  if (ticket !== renderCount) { // a newer navigation won: drop this one's charts too
    pendingCharts.length = 0;
    return;
  }
  renderChrome(...page.chrome);
  main.replaceChildren(...page.content);
  main.dataset.ready = String(ticket);
  drawCharts();
}

// ---------------------------------------------------------------- the report (embedded data)

function renderReport(r) {
  document.title = `ragpulse report: ${fmtTime(r.window.start)} – ${fmtTime(r.window.end)}`;
  document.getElementById("nav").replaceChildren();
  document.getElementById("controls").replaceChildren(h("span", {}, `generated ${fmtTime(r.generated_at)}`));
  const main = document.getElementById("main");
  const out = [h("div", { class: "report-head" },
    h("h1", {}, "ragpulse report"),
    h("p", { class: "muted" }, `${fmtTime(r.window.start)} – ${fmtTime(r.window.end)}`,
      r.service ? ` · service ${r.service}` : " · every service", ` · ${r.source}`))];
  if (!r.overview.totals.traces && !r.overview.scores.length) {
    out.push(h("div", { class: "panel empty" }, "No traces in this window."));
  } else {
    out.push(...overviewView(r.overview, r.regressions));
  }
  out.push(h("h2", { id: "worst" }, `Worst traces (${r.worst.length}, lowest score first)`));
  out.push(r.worst.length ? tracesTable(r.worst, null) : h("p", { class: "muted" }, "No scored trace in this window."));
  for (const d of r.details) {
    out.push(h("section", { class: "trace-section", id: `trace-${d.trace.trace_id}` },
      h("h2", {}, d.trace.question || d.trace.trace_id), ...traceView(d)));
  }
  out.push(h("h2", { id: "report-alerts" }, "Alerts"));
  out.push(...alertsView(r.alerts).slice(1));
  main.replaceChildren(...out);
  main.dataset.ready = "report";
  drawCharts();
}

if (REPORT) {
  renderReport(REPORT);
} else {
  window.addEventListener("hashchange", render);
  render();
}
