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

/** The ms from one API time to another, to the µs (or ns) the API gives, which a Date (whole ms)
 * would drop; null when either is missing. */
function msBetween(from, to) {
  const a = parseTime(from);
  const b = parseTime(to);
  if (!a || !b) return null;
  // What parseTime leaves out: the digits past the ms, as a fraction of a ms.
  const rest = (text) => { const m = /\.\d{3}(\d+)/.exec(String(text)); return m ? Number(`0.${m[1]}`) : 0; };
  return (b.getTime() - a.getTime()) + (rest(to) - rest(from));
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
/** A duration given in ms, in the unit that suits it, to 3 significant digits: `5.4 µs`, `466 µs`,
 * `1.25 ms`, `3.4 s`, `2 min 5 s`, `1 h 2 min`. */
function fmtMs(v) {
  if (v === null || v === undefined || v === "" || !Number.isFinite(Number(v))) return "—";
  v = Number(v);
  if (v < 0) return `−${fmtMs(-v)}`;
  if (v === 0) return "0 ms";
  // Rounded first: 999.7 µs is 1 ms, not 1000 µs.
  const digits = (x) => Number(x.toPrecision(3));
  if (digits(v * 1000) < 1000) return `${digits(v * 1000)} µs`;
  if (digits(v) < 1000) return `${digits(v)} ms`;
  if (digits(v / 1000) < 60) return `${digits(v / 1000)} s`;
  const seconds = Math.round(v / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  const minutes = Math.round(seconds / 60);
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}
function fmtUsd(v) { return v === null || v === undefined ? "—" : `$${v.toFixed(v < 1 ? 4 : 2)}`; }
function badge(text) { return h("span", { class: `badge ${text || "none"}` }, text || "—"); }

function epoch(text) { const d = parseTime(text); return d ? d.getTime() / 1000 : null; }

// A slice value as shown and as the API's `slice` parameter takes it: null is the traces without one.
const NO_VALUE = "(none)";
function sliceLabel(v) { return v === null || v === undefined ? NO_VALUE : String(v); }

/** A JSON column read back as text by some stores (the probe runs' `summary`) or as an object. */
function jsonValue(v) {
  if (typeof v !== "string") return v;
  try { return JSON.parse(v); } catch (_) { return null; }
}

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

/** An API answer other than 200: `status` (null: no answer) and `reason`, the server's own words. */
class ApiError extends Error {
  constructor(message, status = null, reason = null) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

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
    const reason = (body && body.error) || response.statusText;
    throw new ApiError(`${url}: ${response.status} ${reason}`, response.status, reason);
  }
  return body;
}

// ---------------------------------------------------------------- charts (uPlot)

const pendingCharts = [];

/** A chart box; the chart is drawn once the box is on the page (uPlot needs its width). */
function chart(title, xs, series, options = {}) {
  const box = h("div", { class: "panel chart", "data-chart": title, id: options.id }, h("h3", {}, title));
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
 * where a bucket has no row (a gap, never a line across it). Names in `order` when given (each
 * keeps the colour of its place there, so several charts of the same names agree), else sorted. */
function pivot(buckets, rows, field, order = null) {
  const at = new Map(buckets.map((t, i) => [epoch(t), i]));
  // Scores with no value in the window (all skipped) would only crowd the legend.
  const valued = new Set(rows.filter((r) => r[field] !== null && r[field] !== undefined).map((r) => r.name));
  const names = order ? order.filter((n) => valued.has(n)) : [...valued].sort();
  const index = new Map(names.map((n, i) => [n, i]));
  const colour = (name, i) => PALETTE[(order ? order.indexOf(name) : i) % PALETTE.length];
  const series = names.map((name, i) => ({ label: name, color: colour(name, i), values: buckets.map(() => null) }));
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
  nav.replaceChildren(...[["overview", "Overview"], ["traces", "Traces"], ["sessions", "Sessions"], ["review", "Review"], ["probes", "Probes"], ["alerts", "Alerts"], ["rescores", "Rescores"]].map(([key, label]) =>
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

/** A link to the trace list with these filters (empty ones left out). */
function tracesHref(filters) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(filters)) if (v !== null && v !== undefined && v !== "") query.set(k, v);
  const text = query.toString();
  return `#/traces${text ? "?" + text : ""}`;
}

/** A select of slices (`DIMENSION=VALUE`, one per value of each dimension, grouped by dimension).
 * A slice from the URL that is not among the choices stays visible and selected. */
function sliceSelect(dimensions, current, empty, onchange) {
  const groups = Object.entries(dimensions || {}).map(([name, values]) =>
    [name, values.map((v) => `${name}=${sliceLabel(v)}`)]);
  const known = groups.some(([, choices]) => choices.includes(current));
  return h("select", { name: "slice", onchange },
    h("option", { value: "" }, empty),
    current && !known ? h("option", { value: current, selected: true }, current) : null,
    groups.map(([name, choices]) => h("optgroup", { label: name },
      choices.map((c) => h("option", { value: c, selected: c === current }, c)))));
}

// ---------------------------------------------------------------- overview

/** The overview's own filters (`monitoring.dimensions`): one slice, and a dimension to split by. */
function overviewFilters(dimensions, view) {
  const names = Object.keys(dimensions || {});
  if (!names.length && !view.slice && !view.by) return null;
  const set = (changes) => go("/overview", { ...view, ...changes });
  const splits = [...new Set([...names, ...(view.by ? [view.by] : [])])];
  return h("form", { class: "filters", id: "overview-filters", onsubmit: (e) => e.preventDefault() },
    h("label", {}, "slice", sliceSelect(dimensions, view.slice, "no slice", (e) => set({ slice: e.target.value }))),
    h("label", {}, "split by", h("select", { name: "by", onchange: (e) => set({ by: e.target.value }) },
      h("option", { value: "" }, "nothing"),
      splits.map((d) => h("option", { value: d, selected: d === view.by }, d)))),
    view.slice || view.by ? h("button", { type: "button", onclick: () => set({ slice: null, by: null, score: null }) }, "Clear") : null);
}

/** What the figures count, when it is not the app's whole traffic: a probe's, a slice. */
function scopeLine(o, view) {
  if (!o.probe && !o.slice) return null;
  const everything = () => go("/overview", { ...view, slice: null, probe: null });
  return h("p", { class: "muted", id: "overview-scope" },
    o.probe ? ["Probe ", h("b", {}, o.probe), "'s traffic (its golden questions), not the app's own. "] : null,
    o.slice ? ["Only traces with ", h("b", {}, o.slice), ". "] : null,
    h("a", { href: "#/overview", onclick: (e) => { e.preventDefault(); everything(); } }, "Show the app's whole traffic"));
}

/** The score whose means differ most between slices (the first by name among ties). */
function widestSpread(rows, names) {
  let best = names[0] || null;
  let widest = -1;
  for (const name of names) {
    const means = rows.filter((r) => r.name === name && r.mean !== null && r.mean !== undefined).map((r) => r.mean);
    const spread = means.length ? Math.max(...means) - Math.min(...means) : -1;
    if (spread > widest) { widest = spread; best = name; }
  }
  return best;
}

/** The overview split by a dimension: a table of every score in every slice, and the trends of
 * one score with a line per slice. */
function splitView(o, view, xs, x) {
  const by = o.by;
  const rows = o.slice_scores || [];
  // Slices in the order of the dimension's values (most scores first); a colour each, as on the charts.
  const order = [...new Set([...((o.dimensions || {})[by] || []), ...rows.map((r) => r.slice)].map(sliceLabel))];
  const colour = (label) => PALETTE[order.indexOf(label) % PALETTE.length];
  // Scores skipped in every slice (no reference to score against) are named once, not tabulated.
  const applied = (r) => (r.n || 0) - (r.n_skipped || 0) > 0;
  const names = [...new Set(rows.filter(applied).map((r) => r.name))].sort();
  const skipped = [...new Set(rows.map((r) => r.name))].filter((n) => !names.includes(n)).sort();
  const cells = new Map(rows.map((r) => [`${r.name}\u0000${sliceLabel(r.slice)}`, r]));
  const overall = new Map(o.scores.map((s) => [s.name, s]));
  const picked = (view && view.score) || widestSpread(rows, names);
  const sliceOf = (label) => `${by}=${label}`;
  // The trace list takes one slice: with a slice chosen above, a column's traces are its split value's.
  const figures = (r, slice) => {
    if (!r) return "—";
    const failing = (r.n_fail || 0) + (r.n_error || 0);
    return [h("div", { class: "mean" }, fmtNum(r.mean)),
      h("div", { class: "muted small" }, `${fmtPct(r.pass_rate)} pass · n ${fmtNum(r.n)}`),
      r.error_rate ? h("div", { class: "small error-text" }, `${fmtPct(r.error_rate)} errors`) : null,
      failing && !REPORT ? h("a", { class: "small", href: tracesHref({ failing: r.name, slice: slice || (view && view.slice), probe: o.probe }) }, `${fmtNum(failing)} failing`) : null];
  };
  const counts = (r) => (r ? `n ${r.n} · pass ${r.n_pass} · fail ${r.n_fail} · error ${r.n_error} · skipped ${r.n_skipped}` : null);
  const pick = (name) => (view && !REPORT ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); go("/overview", { ...view, score: name }); } }, name) : name);

  const out = [h("h2", {}, `Scores by ${by}`)];
  out.push(h("div", { class: "scroll" }, h("table", { id: "slice-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "score"), h("th", { class: "num" }, o.slice ? o.slice : "all"),
      order.map((label) => h("th", { class: "num", "data-slice": label },
        h("span", { class: "swatch", style: `background:${colour(label)}` }), " ",
        REPORT ? label : h("a", { href: tracesHref({ slice: sliceOf(label), probe: o.probe }), title: `the traces of ${sliceOf(label)}` }, label))))),
    h("tbody", {}, names.map((name) => h("tr", { "data-score": name, class: name === picked ? "picked" : null },
      h("td", {}, pick(name)),
      h("td", { class: "num slice-cell", title: counts(overall.get(name)) }, figures(overall.get(name), null)),
      order.map((label) => {
        const r = cells.get(`${name}\u0000${label}`);
        return h("td", { class: "num slice-cell", "data-slice": label, title: counts(r) }, figures(r, sliceOf(label)));
      })))))));
  if (skipped.length) out.push(h("p", { class: "muted small", id: "slice-skipped" }, `Skipped in every ${by}: ${skipped.join(", ")}.`));

  const scoreSelect = view && !REPORT
    ? h("select", { name: "score", onchange: (e) => go("/overview", { ...view, score: e.target.value }) },
      [...new Set([...names, ...(picked ? [picked] : [])])].map((n) => h("option", { value: n, selected: n === picked }, n)))
    : h("b", {}, picked || "—");
  out.push(h("div", { class: "filters", id: "split-score" }, h("label", {}, `trends of one score, a line per ${by}`, scoreSelect)));
  const series = (o.slice_series || []).filter((r) => r.name === picked).map((r) => ({ ...r, name: sliceLabel(r.slice) }));
  out.push(h("div", { class: "charts", id: "split-charts" },
    chart(`${picked} mean by ${by}`, xs, pivot(o.buckets, series, "mean", order), { range: [0, 1], x, id: "split-mean" }),
    chart(`${picked} pass rate by ${by}`, xs, pivot(o.buckets, series, "pass_rate", order), { range: [0, 1], tick: fmtPct, axis: axisPct, x, id: "split-pass" }),
    chart(`${picked} error rate by ${by}`, xs, pivot(o.buckets, series, "error_rate", order), { range: [0, 1], tick: fmtPct, axis: axisPct, x, id: "split-error" })));
  return out;
}

/** The overview; `view` holds the page's filters from the URL (null in the report: no links to
 * other pages, no controls). */
function overviewView(o, regressions, view = null) {
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
    h("div", { class: "kpi", "data-kpi": "tool-errors" },
      h("div", { class: "value" }, t.tool_calls ? fmtPct(t.tool_errors / t.tool_calls) : "—"),
      h("div", { class: "label" }, "tool error rate", h("div", { class: "small muted" }, `${fmtNum(t.tool_errors)} of ${fmtNum(t.tool_calls)} tool calls`))),
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
      h("td", {}, s.n_fail + s.n_error > 0 && !REPORT ? h("a", { href: tracesHref({ failing: s.name, slice: view && view.slice, probe: o.probe }) }, "failing traces") : ""))))));

  const xs = o.buckets.map(epoch);
  const col = (field, empty = null) => column(o.buckets, o.traffic, field, empty);
  // The whole window on the x axis, so the charts line up and a quiet stretch shows as such.
  const x = [Math.min(xs[0], epoch(o.window.start)), epoch(o.window.end)];
  if (o.by) out.push(...splitView(o, view, xs, x));

  if (regressions) out.push(regressions instanceof Node ? regressions : regressionsView(regressions));

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

async function overviewPage(params) {
  // The page's own filters, from the URL: a slice, a dimension to split by, the score its charts
  // show, a probe's traffic in place of the app's.
  const view = {};
  for (const key of ["slice", "by", "score", "probe"]) if (params.get(key)) view[key] = params.get(key);
  const query = { since: scope.since, service: scope.service, slice: view.slice, by: view.by, probe: view.probe };
  // The slice choices are the window's values over everything: in a slice (or a probe's traffic)
  // `o.dimensions` holds that slice's values only, so they come from the overview of everything.
  const narrowed = Boolean(view.slice || view.probe);
  const [o, info] = await Promise.all([api("overview", query), narrowed ? scopeInfo() : null]);
  if (!narrowed) rememberScope(o);
  const dimensions = narrowed ? info.dimensions : o.dimensions || {};
  const main = [h("h1", {}, "Overview"), overviewFilters(dimensions, view), scopeLine(o, view)];
  if (!o.totals.traces && !o.scores.length) {
    main.push(view.slice || view.probe
      ? h("div", { class: "panel empty" }, `No traces and no scores in the last ${scope.since}${scope.service ? " for " + scope.service : ""} in this view.`)
      : emptyState());
  } else {
    main.push(...overviewView(o, regressionsPanel({ since: scope.since, service: scope.service, slice: view.slice, probe: view.probe }), view));
  }
  return { chrome: ["overview", o.services.map((s) => s.service_name)], content: main.filter(Boolean) };
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

/** Chips, then how many more there are (`+N`), kept on the line of the last chip: a failing cell
 * wraps between chips (app.css), never leaving the count alone on a line. */
function chipsAndMore(chips, more) {
  if (more <= 0) return chips;
  const count = h("span", { class: "muted" }, ` +${more}`);
  return chips.length ? [chips.slice(0, -1), h("span", { class: "nowrap" }, chips[chips.length - 1], count)] : [count];
}

/** The failed scores of a trace: the first few as chips, then how many more. */
function failingChips(names, shown = 2) {
  return chipsAndMore(names.slice(0, shown).map((n) => h("span", { class: "chip" }, n)), names.length - shown);
}

// The services and score names of the current time range and service, for the filters of the
// trace list; kept for a minute, so paging and sorting do not ask for the overview again.
let scopeInfoCache = null;

async function scopeInfo() {
  const key = `${scope.since}|${scope.service}`;
  if (scopeInfoCache && scopeInfoCache.key === key && Date.now() - scopeInfoCache.at < 60_000) return scopeInfoCache;
  return rememberScope(await api("overview", { since: scope.since, service: scope.service }));
}

/** Keeps what an overview of the whole scope (no slice, no probe) says for the filters. */
function rememberScope(o) {
  scopeInfoCache = { key: `${scope.since}|${scope.service}`, at: Date.now(), services: o.services.map((s) => s.service_name),
    names: o.scores.map((s) => s.name), dimensions: o.dimensions || {} };
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
    Object.keys(info.dimensions).length || filters.slice
      ? h("label", {}, "slice", sliceSelect(info.dimensions, filters.slice || "", "any", (e) => set({ slice: e.target.value })))
      : null,
    // A probe's traces, from a link of the probes page (every trace otherwise, the app's and the probes').
    filters.probe ? select("probe", "probe", [["", "any"], [filters.probe, filters.probe]]) : null,
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
  out.push(pager(page, set, "← newer", "older →"));
  return { chrome, content: out };
}

/** The previous / next buttons of a paged list (`page`: its offset, limit and total; `set` moves to an offset). */
function pager(page, set, previous, next) {
  return h("div", { class: "pager" },
    h("button", { id: "prev", disabled: page.offset === 0, onclick: () => set({ offset: Math.max(0, page.offset - page.limit) || null }) }, previous),
    h("button", { id: "next", disabled: page.offset + page.limit >= page.total, onclick: () => set({ offset: page.offset + page.limit }) }, next));
}

// ---------------------------------------------------------------- one trace

/** A trace's view; `review` (review.js's TraceReview, not in a report) adds the verdict controls. */
function traceView(d, review = null) {
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
  out.push(timeline(t, d.steps, d.documents));
  out.push(h("h2", {}, "Documents"));
  out.push(documentsView(d.documents));
  out.push(h("h2", {}, "Scores"));
  out.push(scoresView(d.scores, review));
  return out;
}

function timeline(t, steps, documents = []) {
  if (!steps.length) return h("p", { class: "muted" }, "No RAG step was mapped from this trace's spans.");
  // Each step's start and length in ms from the trace's start, to the µs: a trace of 466 µs is
  // drawn as one of minutes, each bar a share of the whole.
  const origin = t.start_time || (steps.find((s) => s.start_time) || {}).start_time;
  const spans = steps.map((s) => {
    const start = msBetween(origin, s.start_time) ?? 0;
    const end = msBetween(origin, s.end_time);
    return { start, length: Math.max(0, s.duration_ms ?? (end === null ? 0 : end - start)) };
  });
  const traceEnd = t.duration_ms ?? msBetween(origin, t.end_time) ?? 0;
  // The whole drawn: the trace, and any step outside it (clocks of several hosts disagree).
  const first = Math.min(0, ...spans.map((p) => p.start));
  const total = Math.max(traceEnd, ...spans.map((p) => p.start + p.length)) - first;
  const share = (ms) => (total > 0 ? (ms / total) * 100 : 0);
  let round = 0;
  return h("div", { class: "panel timeline" }, steps.map((s, i) => {
    const offset = spans[i].start;
    const left = Math.min(100, Math.max(0, share(offset - first)));
    const width = Math.min(100 - left, share(spans[i].length));
    const kind = ["retrieval", "rerank", "llm", "tool", "embedding"].includes(s.kind) ? s.kind : "other";
    const tokens = s.input_tokens || s.output_tokens ? ` · ${fmtNum(s.input_tokens)}/${fmtNum(s.output_tokens)} tok` : "";
    const failed = (s.status || "").toLowerCase() === "error";
    const at = `${offset < 0 ? "" : "+"}${fmtMs(offset)}`;
    const label = s.kind === "retrieval" ? `retrieval ${++round}` : s.kind;
    const what = s.tool_name ? [" ", h("code", {}, s.tool_name)] : [" ", s.name || ""];
    const docs = s.kind === "retrieval" || s.kind === "rerank"
      ? documents.filter((d) => d.span_id === s.span_id && d.stage === "retrieved") : [];
    return h("div", { class: `row${failed ? " failed" : ""}`, "data-kind": s.kind },
      h("div", { class: "clip", title: s.name || "" }, h("b", {}, label), ...what, s.model ? ` (${s.model})` : ""),
      // A bar too short to see is 2 px wide (app.css), kept inside the track.
      h("div", { class: "track" }, h("div", { class: `span k-${kind}`, style: `left:min(${left}%, calc(100% - 2px));width:${width}%`,
        title: `${at} · ${fmtMs(s.duration_ms)}` })),
      h("div", { class: "num muted" }, h("span", { class: "offset", title: "from the trace's start" }, at), " · ", fmtMs(s.duration_ms), tokens,
        failed ? [" ", h("span", { class: "badge fail" }, s.tool_name ? "tool failed" : "error")] : ""),
      s.tool_name && s.kind === "tool" && s.input ? h("div", { class: "detail muted" }, `arguments ${s.input.length > 160 ? `${s.input.slice(0, 160)}…` : s.input}`
        + (s.result_size !== null && s.result_size !== undefined ? ` · result ${fmtNum(s.result_size)} chars` : "")) : null,
      s.query || docs.length ? h("div", { class: "detail round" },
        s.query ? h("span", { class: "muted" }, `query “${s.query.length > 120 ? `${s.query.slice(0, 120)}…` : s.query}” · `) : null,
        h("span", { class: "muted" }, `${docs.length} document${docs.length === 1 ? "" : "s"}`),
        docs.map((d) => h("span", { class: `doc${d.expected === true ? " expected" : ""}`, title: d.content || "" }, `#${d.rank} ${d.doc_id || "—"}`))) : null);
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

function scoresView(scores, review = null) {
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
      items.length ? h("ul", { class: "claims" }, items.map((item, i) => h("li", { class: item.ok ? "ok" : "bad" },
        review ? review.claim(s, i, item) : null,
        h("span", { class: `badge ${item.ok ? "pass" : "fail"}` }, item.ok ? "✓" : "✗"), " ", item.text,
        item.evidence ? h("div", { class: "evidence" }, `“${item.evidence}”`) : null))) : null,
      judged ? h("p", { class: "muted provenance" },
        `judge ${s.judge_model || "—"}${s.judge_provider ? ` (${s.judge_provider})` : ""} · prompt ${s.prompt_version || "—"} · `
        + `${fmtNum(s.judge_input_tokens)} in / ${fmtNum(s.judge_output_tokens)} out tokens · ${fmtMs(s.latency_ms)}`) : null,
      review ? review.controls(s) : null);
  }));
}

async function tracePage(traceId) {
  const d = await api(`traces/${encodeURIComponent(traceId)}`);
  const review = new TraceReview(d);
  const view = h("div", { id: "trace-view" }, ...traceView(d, review));
  setTimeout(() => review.attach(view), 0);
  return { chrome: ["traces", []], content: [h("h1", {}, "Trace"), view, reviewKeysHelp()] };
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

// ---------------------------------------------------------------- probes

/** A run's scores together: the share of applied scores that passed, and the scores that failed
 * or errored in some case. */
function runFigures(summary) {
  let passed = 0;
  let applied = 0;
  const failing = [];
  for (const [name, f] of Object.entries(jsonValue(summary) || {})) {
    passed += f.n_pass || 0;
    applied += (f.n || 0) - (f.n_skipped || 0);
    if ((f.n_fail || 0) + (f.n_error || 0) > 0) failing.push(name);
  }
  return { passRate: applied ? passed / applied : null, failing: failing.sort() };
}

function runDuration(run) {
  const start = parseTime(run.started_at);
  const end = parseTime(run.finished_at);
  return start && end ? end - start : null;
}

/** A count that should be 0, marked when it is not. */
function badCount(n) {
  return h("td", { class: n ? "num bad" : "num" }, fmtNum(n));
}

function probeRunsTable(runs) {
  const open = (r) => go(`/probe/${encodeURIComponent(r.run_id)}`);
  return h("div", { class: "scroll" }, h("table", { id: "probe-runs" },
    h("thead", {}, h("tr", {}, ["started", "probe", "status", "duration", "cases", "answered", "errors", "traces received",
      "missing traces", "scores passed", "failing scores"].map((c, i) => h("th", { class: i >= 3 && i <= 9 ? "num" : null }, c)))),
    h("tbody", {}, runs.map((r) => {
      const f = runFigures(r.summary);
      return h("tr", { class: "link", "data-run": r.run_id, onclick: (e) => { if (!e.target.closest("a")) open(r); } },
        h("td", { class: "nowrap" }, h("a", { href: `#/probe/${encodeURIComponent(r.run_id)}` }, fmtTime(r.started_at))),
        h("td", {}, h("a", { href: `#/probes?probe=${encodeURIComponent(r.probe)}`, title: `the runs of ${r.probe}` }, r.probe)),
        h("td", { title: r.error || null }, badge(r.status)),
        h("td", { class: "num" }, fmtMs(runDuration(r))),
        h("td", { class: "num" }, fmtNum(r.cases)), h("td", { class: "num" }, fmtNum(r.answered)),
        badCount(r.errors), h("td", { class: "num" }, fmtNum(r.traces_received)), badCount(r.missing_traces),
        h("td", { class: "num" }, fmtPct(f.passRate)),
        h("td", { class: "failing", title: f.failing.join(", ") }, failingChips(f.failing, 3)));
    }))));
}

/** What the Probes page lists: `n` runs (at least one) of one probe or of every probe. */
function probeRunCount(n, probe) {
  return n === 1 ? `One run${probe ? "" : " of a probe"} so far. ` : `The ${n} most recent runs${probe ? "" : " of every probe"}, newest first. `;
}

/** Per probe, each score's mean and pass rate run after run (finished runs, oldest first). */
function probeTrends(runs) {
  const byProbe = new Map();
  for (const r of [...runs].reverse()) {
    if (r.status !== "done") continue;
    if (!byProbe.has(r.probe)) byProbe.set(r.probe, []);
    byProbe.get(r.probe).push(r);
  }
  const charts = [];
  for (const [probe, done] of byProbe) {
    const summaries = done.map((r) => jsonValue(r.summary) || {});
    const names = [...new Set(summaries.flatMap((s) => Object.keys(s)))].sort();
    const series = (field) => names.map((name, i) => ({ label: name, color: PALETTE[i % PALETTE.length],
      values: summaries.map((s) => (s[name] && s[name][field] !== undefined ? s[name][field] : null)) }))
      .filter((s) => s.values.some((v) => v !== null));
    const xs = done.map((r) => epoch(r.started_at));
    charts.push(chart(`${probe}: score means per run`, xs, series("mean"), { range: [0, 1] }),
      chart(`${probe}: pass rates per run`, xs, series("pass_rate"), { range: [0, 1], tick: fmtPct, axis: axisPct }));
  }
  return charts;
}

function probesEmptyState(probe) {
  if (probe) {
    return h("div", { class: "panel empty" }, h("p", {}, `No run of probe ${probe} yet.`), h("a", { href: "#/probes" }, "Every probe's runs"));
  }
  return h("div", { class: "panel empty" },
    h("h2", {}, "No probe run yet"),
    h("p", {}, "A probe sends your golden questions to the app on a schedule, over its real HTTP API, and scores the traces that "
      + "come back against the cases' references. Declare one under probes: in ragpulse.yaml (see docs/probes.md) and restart "
      + "ragpulse serve: the first run is at start-up."),
    h("pre", {}, [
      "probes:",
      "  - name: shop-bot-golden",
      "    cases: cases.yaml            # golden cases (the format `ragpulse datasets load` reads)",
      "    every: 3600                  # seconds between runs",
      "    request:",
      "      url: \"https://shop.example.com/api/ask\"",
      "      json: {question: \"{question}\"}",
    ].join("\n")));
}

async function probesPage(params) {
  const probe = params.get("probe") || "";
  const listed = await api("probes", { probe, limit: 50 });
  const out = [h("h1", {}, probe ? `Probe ${probe}` : "Probes")];
  if (!listed.runs.length) {
    out.push(probesEmptyState(probe));
    return { chrome: ["probes", []], content: out };
  }
  out.push(h("p", { class: "muted", id: "probe-count" }, probeRunCount(listed.runs.length, probe),
    probe ? [h("a", { href: "#/probes" }, "every probe"), " · ", h("a", { href: tracesHref({ probe }) }, "its traces"), " · ",
      h("a", { href: `#/overview?probe=${encodeURIComponent(probe)}` }, "its figures on the overview")] : null));
  out.push(probeRunsTable(listed.runs));
  const trends = probeTrends(listed.runs);
  if (trends.length) out.push(h("h2", {}, "Scores run after run"), h("div", { class: "charts" }, trends));
  return { chrome: ["probes", []], content: out };
}

/** A case's scores: those that failed or errored first, skipped ones only counted. */
function caseScores(scores) {
  const order = { fail: 0, error: 1, pass: 2 };
  const entries = Object.entries(scores || {});
  const shown = entries.filter(([, s]) => s.status !== "skipped")
    .sort(([a, x], [b, y]) => (order[x.status] ?? 3) - (order[y.status] ?? 3) || a.localeCompare(b));
  const skipped = entries.length - shown.length;
  return h("div", { class: "case-scores" },
    shown.map(([name, s]) => h("span", { class: `badge ${s.status || "none"}`, "data-score": name,
      title: `${name}: ${s.status}, value ${fmtNum(s.value)}${s.label ? ` (${s.label})` : ""} · ${s.evaluator || ""}` },
    `${name} ${fmtNum(s.value, 2)}`)),
    skipped ? h("span", { class: "muted small" }, `${skipped} skipped`) : null,
    !entries.length ? h("span", { class: "muted" }, "—") : null);
}

function arrived(c) {
  if (c.received) return h("span", { class: "badge pass" }, c.matched_by === "question" ? "yes (by question)" : "yes");
  return c.outcome === "answered" ? h("span", { class: "badge fail" }, "no") : h("span", { class: "muted" }, "—");
}

function probeRunView(d, before) {
  const run = d.run;
  const summary = jsonValue(run.summary) || {};
  const previous = before ? jsonValue(before.summary) || {} : {};
  const out = [];
  out.push(h("div", { class: "meta" },
    h("span", {}, "probe ", h("a", { href: `#/probes?probe=${encodeURIComponent(run.probe)}` }, h("b", {}, run.probe))),
    h("span", {}, "status ", badge(run.status)),
    h("span", {}, "started ", h("b", {}, fmtTime(run.started_at))),
    h("span", {}, "took ", h("b", {}, fmtMs(runDuration(run)))),
    h("span", {}, "run ", h("code", {}, run.run_id)),
    h("a", { href: tracesHref({ probe: run.probe }) }, "the probe's traces")));
  if (run.error) out.push(h("div", { class: "banner err", role: "alert" }, h("b", {}, "The run failed: "), run.error));
  const kpi = (label, value, bad) => h("div", { class: `kpi${bad ? " bad" : ""}` }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
  out.push(h("div", { class: "kpis", id: "run-counts" },
    kpi("cases", fmtNum(run.cases)), kpi("answered", fmtNum(run.answered)), kpi("errors", fmtNum(run.errors), run.errors > 0),
    kpi("traces received", fmtNum(run.traces_received)), kpi("missing traces", fmtNum(run.missing_traces), run.missing_traces > 0),
    kpi("scores passed", fmtPct(runFigures(summary).passRate))));

  out.push(h("h2", {}, "Scores"));
  const names = Object.keys(summary).sort();
  if (!names.length) {
    out.push(h("p", { class: "muted" }, "No score: no trace of this run arrived (or the run is still waiting for them)."));
  } else {
    const change = (now, then) => {
      if (now === null || now === undefined || then === null || then === undefined) return h("td", { class: "num" }, "—");
      const d = now - then;
      return h("td", { class: `num ${d < -1e-9 ? "worse" : d > 1e-9 ? "better" : ""}` }, `${d > 0 ? "+" : ""}${fmtNum(d)}`);
    };
    out.push(h("table", { id: "probe-summary" },
      h("thead", {}, h("tr", {}, ["score", "n", "pass", "fail", "error", "skipped", "mean", "pass rate",
        before ? "mean, run before" : null, before ? "change" : null].filter(Boolean).map((c, i) => h("th", { class: i ? "num" : null }, c)))),
      h("tbody", {}, names.map((name) => {
        const s = summary[name];
        const p = previous[name] || {};
        return h("tr", { "data-score": name }, h("td", {}, name), h("td", { class: "num" }, fmtNum(s.n)),
          h("td", { class: "num" }, fmtNum(s.n_pass)), badCount(s.n_fail), badCount(s.n_error), h("td", { class: "num" }, fmtNum(s.n_skipped)),
          h("td", { class: "num" }, fmtNum(s.mean)), h("td", { class: "num" }, fmtPct(s.pass_rate)),
          before ? h("td", { class: "num" }, fmtNum(p.mean)) : null, before ? change(s.mean, p.mean) : null);
      }))));
    if (before) {
      out.push(h("p", { class: "muted" }, "The run before: ",
        h("a", { href: `#/probe/${encodeURIComponent(before.run_id)}` }, fmtTime(before.started_at)), "."));
    }
  }

  out.push(h("h2", {}, "Cases"));
  const cases = d.cases || [];
  out.push(cases.length ? h("div", { class: "scroll" }, h("table", { id: "probe-cases" },
    h("thead", {}, h("tr", {}, ["case", "question", "HTTP", "latency", "trace arrived", "scores", ""]
      .map((c, i) => h("th", { class: i === 3 ? "num" : null }, c)))),
    h("tbody", {}, cases.map((c) => h("tr", { "data-case": c.case_id },
      h("td", { class: "nowrap" }, h("code", {}, c.case_id)),
      h("td", { class: "case-question" }, c.question || "—"),
      h("td", { class: "nowrap", title: c.error || null },
        h("span", { class: `badge ${c.outcome === "answered" ? "pass" : "fail"}` }, c.http_status ?? c.outcome ?? "—"),
        c.error ? h("div", { class: "small muted clip" }, c.error) : null),
      h("td", { class: "num" }, fmtMs(c.latency_ms)),
      h("td", {}, arrived(c)),
      h("td", {}, caseScores(c.scores)),
      h("td", {}, c.trace ? h("a", { href: `#/trace/${c.trace.trace_id}` }, "trace") : null))))))
    : h("p", { class: "muted" }, run.status === "running" ? "The run is going on: its cases come when it ends." : "No case was sent."));
  return out;
}

async function probeRunPage(runId, params) {
  const d = await api(`probes/${encodeURIComponent(runId)}`, { probe: params.get("probe") || "" });
  // The probe's finished run before this one, to compare its scores with.
  const listed = await api("probes", { probe: d.run.probe, limit: 50 });
  const start = epoch(d.run.started_at);
  const before = listed.runs.find((r) => r.status === "done" && r.run_id !== d.run.run_id && epoch(r.started_at) < start) || null;
  return { chrome: ["probes", []], content: [h("h1", {}, `Probe run of ${d.run.probe}`), ...probeRunView(d, before)] };
}

// ---------------------------------------------------------------- the router

let renderCount = 0;
// The pending refresh of a page that asked for one (`refresh`: ms): one timer at most, cleared by
// every render, so leaving the page (or drawing it again) never leaves one behind.
let refreshTimer = null;

async function render() {
  const ticket = ++renderCount;
  clearTimeout(refreshTimer);
  refreshTimer = null;
  const { parts, params } = route();
  const main = document.getElementById("main");
  let page;
  try {
    if (parts[0] === "traces") page = await tracesPage(params);
    else if (parts[0] === "trace" && parts[1]) page = await tracePage(parts[1]);
    else if (parts[0] === "sessions") page = await sessionsPage(params);
    else if (parts[0] === "session" && parts[1]) page = await sessionPage(decodeURIComponent(parts.slice(1).join("/")), params);
    else if (parts[0] === "review") page = await reviewPage(params);
    else if (parts[0] === "alerts") page = await alertsPage();
    else if (parts[0] === "probes") page = await probesPage(params);
    else if (parts[0] === "probe" && parts[1]) page = await probeRunPage(decodeURIComponent(parts[1]), params);
    else if (parts[0] === "rescores") page = await rescoresPage();
    else page = await overviewPage(params);
  } catch (exc) {
    if (!(exc instanceof ApiError)) console.error(exc);
    const active = { trace: "traces", traces: "traces", sessions: "sessions", session: "sessions", review: "review", alerts: "alerts", probes: "probes", probe: "probes", rescores: "rescores" }[parts[0]] || "overview";
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
  if (page.refresh) refreshTimer = setTimeout(render, page.refresh);
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
