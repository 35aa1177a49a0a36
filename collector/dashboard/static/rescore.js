/* ragpulse dashboard: rescore runs, stored traces scored again with the evaluators as configured now
 * (docs/rescore.md).
 *
 * - The Rescores page (#/rescores) lists the latest runs, newest first, from GET /api/rescore: what
 *   each scores again (its evaluators, window, service and slice), its progress (traces done of the
 *   window's traces) and counts (traces judged, scores written and replaced, judge tokens), when it
 *   started and ended, and its error. A run held by the judge's budget says so.
 * - While a run is `running`, the page asks again every RESCORE_REFRESH_MS: it returns `refresh`,
 *   which the router in app.js turns into one timer, cleared at the next render (any navigation).
 * - Runs are started by `ragpulse rescore` or POST /api/rescore (a key with the admin scope); the page
 *   only reads.
 *
 * Loaded before app.js, whose helpers (h, api, badge, fmtNum, fmtTime, fmtMs, runDuration, ...) it
 * calls at run time.
 */
"use strict";

const RESCORE_REFRESH_MS = 2000;
const RESCORE_ORIGINS = {
  cli: ["CLI", "run by `ragpulse rescore` on the database file"],
  server: ["server", "run inside ragpulse serve (POST /api/rescore, or `ragpulse rescore --server`)"],
};

/** The share of the window's traces a run has scored: 0 to 1 (a run of an empty window that ended: 1). */
function rescoreShare(run) {
  const total = run.traces_total || 0;
  if (!total) return run.status === "done" ? 1 : 0;
  return Math.max(0, Math.min(1, (run.traces_done || 0) / total));
}

/** A run's progress bar: traces done of the window's traces, and the percentage. */
function rescoreProgress(run) {
  const share = rescoreShare(run);
  const pct = Math.floor(share * 100);
  return h("div", { class: "progress-cell" },
    h("div", { class: `progress ${run.status || "none"}`, role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
      "aria-valuenow": pct, title: `${fmtNum(run.traces_done)} of ${fmtNum(run.traces_total)} traces` },
    h("div", { class: "fill", style: `width:${share * 100}%` })),
    h("div", { class: "progress-text" },
      h("span", { class: "done-of-total" }, `${fmtNum(run.traces_done)} / ${fmtNum(run.traces_total)} traces`),
      h("b", { class: "pct" }, `${pct} %`)),
    run.waiting
      ? h("div", { class: "waiting small", title: "The run waits rather than skip traces: sampling.budget in the config" },
        `waiting for the judge's budget (${run.waiting})`)
      : null);
}

/** What a run scores: its window and, from its request, the service, slice and judge rate. */
function rescoreScope(run) {
  const asked = jsonValue(run.request) || {};
  return h("div", { class: "rescore-scope" },
    h("div", { class: "nowrap" }, `${fmtTime(run.window_start)} –`),
    h("div", { class: "nowrap" }, fmtTime(run.window_end)),
    h("div", { class: "small muted" },
      asked.since ? `last ${asked.since}${asked.until ? ` before ${asked.until}` : ""} · ` : null,
      asked.service ? ["service ", h("b", { class: "service" }, asked.service)] : "every service",
      asked.slice ? [" · slice ", h("b", { class: "slice" }, asked.slice)] : null,
      asked.judge_rate !== null && asked.judge_rate !== undefined ? ` · judge rate ${fmtPct(asked.judge_rate)}` : null));
}

/** When a run ended: its time alone when it is the day it started. */
function rescoreFinished(run) {
  const start = parseTime(run.started_at);
  const end = parseTime(run.finished_at);
  if (!start || !end || start.toDateString() !== end.toDateString()) return fmtTime(run.finished_at);
  return end.toLocaleTimeString([], { timeStyle: "medium" });
}

/** When a run started, and when it ended and how long it took (or, while it goes on, its last batch). */
function rescoreTimes(run) {
  const took = runDuration(run);
  return h("td", { class: "times" },
    h("div", { class: "started nowrap" }, fmtTime(run.started_at)),
    run.status === "running"
      ? h("div", { class: "small muted", title: "when the run stored its last batch" }, `last progress ${fmtTime(run.updated_at)}`)
      : [h("div", { class: "small muted finished nowrap" }, `finished ${rescoreFinished(run)}`),
        took !== null ? h("div", { class: "small muted took" }, `took ${fmtMs(took)}`) : null]);
}

const RESCORE_COLUMNS = ["run", "status", "evaluators", "window", "progress", "judged", "scores written", "replaced",
  "judge tokens", "started"];
const RESCORE_NUMERIC = new Set(["judged", "scores written", "replaced", "judge tokens"]);

function rescoreRows(run) {
  const [origin, how] = RESCORE_ORIGINS[run.origin] || [run.origin || "—", ""];
  const evaluators = run.evaluators || [];
  const row = h("tr", { class: `rescore-run ${run.status || ""}`, "data-run": run.run_id, "data-status": run.status },
    h("td", { class: "nowrap" }, h("code", { class: "run-id" }, run.run_id),
      h("div", { class: "small muted" }, h("span", { class: "origin", title: how }, origin),
        run.resumed ? " · resumed" : null)),
    h("td", { title: run.error || null }, badge(run.status)),
    h("td", { class: "evaluators" }, evaluators.length ? evaluators.join(", ") : "—"),
    h("td", {}, rescoreScope(run)),
    h("td", {}, rescoreProgress(run)),
    h("td", { class: "num judged" }, fmtNum(run.traces_judged)),
    h("td", { class: "num written" }, fmtNum(run.scores_written)),
    h("td", { class: "num replaced" }, fmtNum(run.scores_replaced)),
    h("td", { class: "num tokens", title: "the judge's input / output tokens" },
      `${fmtNum(run.judge_input_tokens)} / ${fmtNum(run.judge_output_tokens)}`),
    rescoreTimes(run));
  if (!run.error) return [row];
  return [row, h("tr", { class: "rescore-error", "data-run": run.run_id },
    h("td", { colspan: RESCORE_COLUMNS.length }, h("span", { class: "error-text" }, h("b", {}, `The run ${run.status === "failed" ? "failed" : "says"}: `), run.error)))];
}

function rescoresTable(runs) {
  return h("div", { class: "scroll" }, h("table", { id: "rescore-runs" },
    h("thead", {}, h("tr", {}, RESCORE_COLUMNS.map((c) => h("th", { class: RESCORE_NUMERIC.has(c) ? "num" : null }, c)))),
    h("tbody", {}, runs.map(rescoreRows))));
}

function rescoresEmptyState() {
  const host = location.host || "127.0.0.1:4318";
  return h("div", { class: "panel empty", id: "rescores-empty" },
    h("h2", {}, "No rescore run yet"),
    h("p", {}, "A rescore scores stored traces again with the evaluators as they are configured now (after a change of "
      + "threshold, evaluator or judge prompt) and puts the new scores in place of the old ones. Start one from the "
      + "command line, or over the API with a key of the admin scope; its progress shows here."),
    h("pre", {}, [
      "ragpulse rescore --since 7d --dry-run      # how many traces, judge calls and tokens; writes nothing",
      "ragpulse rescore --since 7d --evaluator faithfulness [--server URL | --db FILE]",
      "",
      `curl -X POST http://${host}/api/rescore -H 'Content-Type: application/json' \\`,
      "  -d '{\"since\": \"7d\", \"evaluators\": [\"faithfulness\"]}'",
      "# with keys on, add -H 'Authorization: Bearer KEY' (a key with the admin scope)",
    ].join("\n")),
    h("p", { class: "muted" }, "The window, service, slice, judge rate and what a run costs: docs/rescore.md."));
}

async function rescoresPage() {
  const listed = await api("rescore");
  const runs = listed.runs || [];
  const out = [h("h1", {}, "Rescores")];
  const chrome = ["rescores", []];
  if (!runs.length) {
    out.push(rescoresEmptyState());
    return { chrome, content: out };
  }
  const running = runs.filter((r) => r.status === "running");
  out.push(h("p", { class: "muted", id: "rescore-count" },
    `The ${runs.length === 1 ? "only run" : `${runs.length} most recent runs`}, newest first, whatever the time range and service above. `,
    running.length
      ? h("span", { id: "rescore-live" }, `${running.length === 1 ? "A run is" : `${running.length} runs are`} going on: this page refreshes every ${RESCORE_REFRESH_MS / 1000} s.`)
      : "Start another with ragpulse rescore (docs/rescore.md)."));
  out.push(rescoresTable(runs));
  return { chrome, content: out, refresh: running.length ? RESCORE_REFRESH_MS : null };
}
