/* ragpulse dashboard: sessions, the conversations of an app's users (docs/sessions.md).
 *
 * - The Sessions page (#/sessions) lists the sessions active in the time range of the bar, worst
 *   first, 50 a page, from GET /api/sessions: filters for the status, the sort and its order, and
 *   the user live in the URL (`#/sessions?status=ended&user=u-1`).
 * - A session's view (#/session/<id>?service=S) shows its figures and its turns in order as a
 *   conversation, from GET /api/sessions/{id}. The id is URL-encoded in the hash: it may hold `/`.
 *
 * Loaded before app.js, whose helpers (h, api, go, scope, scopeInfo, badge, fmtNum, ...) it calls at
 * run time. Text from spans (ids, users, questions, answers) only ever becomes text nodes.
 */
"use strict";

const SESSION_SORTS = [["worst", "worst"], ["last_activity", "last activity"], ["turns", "turns"]];
// The words of each sort's order: [desc, asc].
const SESSION_ORDERS = {
  worst: ["worst first", "best first"],
  last_activity: ["latest first", "earliest first"],
  turns: ["most first", "fewest first"],
};
// The page's own parameters in the URL, passed on to the API as they are.
const SESSION_FILTERS = ["status", "sort", "order", "user", "limit", "offset"];

/** The link to a session's view; `service` picks it when its id exists under several services. */
function sessionHref(sessionId, service) {
  return `#/session/${encodeURIComponent(sessionId)}${service ? `?service=${encodeURIComponent(service)}` : ""}`;
}

function openSession(sessionId, service) {
  go(`/session/${encodeURIComponent(sessionId)}`, { service });
}

/** A session's failing scores as chips, the most failures first: `faithfulness 3`. */
function sessionFailChips(fails, shown = 2) {
  const failing = Object.entries(fails || {}).filter(([, n]) => n > 0)
    .sort(([a, x], [b, y]) => y - x || a.localeCompare(b));
  return chipsAndMore(failing.slice(0, shown).map(([name, n]) => h("span", { class: "chip", title: `${n} failed ${name} score${n === 1 ? "" : "s"}` }, `${name} ${n}`)),
    failing.length - shown);
}

/** The count of failed turns: red and bold when there is one. */
function failedTurnsCell(n) {
  return h("td", { class: n ? "num bad failed-turns" : "num failed-turns" }, fmtNum(n));
}

function sessionsTable(sessions) {
  const columns = ["session", "service", "user", "turns", "failed turns", "mean score", "failing scores", "status", "started", "last activity"];
  const numeric = new Set(["turns", "failed turns", "mean score"]);
  return h("div", { class: "scroll" }, h("table", { id: "session-table" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: numeric.has(c) ? "num" : null }, c)))),
    h("tbody", {}, sessions.map((s) => h("tr", { class: `link${s.failed_turns ? " failed" : ""}`, "data-session": s.session_id, "data-service": s.service_name,
      onclick: (e) => { if (!e.target.closest("a")) openSession(s.session_id, s.service_name); } },
    h("td", { class: "clip session-id", title: s.session_id }, h("a", { href: sessionHref(s.session_id, s.service_name) }, s.session_id)),
    h("td", { class: "nowrap" }, s.service_name || "—"),
    h("td", { class: "clip user", title: s.user_id || "" }, s.user_id
      ? h("a", { href: `#/sessions?user=${encodeURIComponent(s.user_id)}`, title: `the sessions of ${s.user_id}` }, s.user_id) : "—"),
    h("td", { class: "num" }, fmtNum(s.turns)),
    failedTurnsCell(s.failed_turns),
    h("td", { class: "num" }, fmtNum(s.mean_score)),
    h("td", { class: "failing" }, sessionFailChips(s.score_fails)),
    h("td", {}, badge(s.status)),
    h("td", { class: "nowrap" }, fmtTime(s.started_at)),
    h("td", { class: "nowrap" }, fmtTime(s.last_activity)))))));
}

function sessionsEmptyState() {
  return h("div", { class: "panel empty", id: "sessions-empty" },
    h("h2", {}, `No session in the last ${scope.since}${scope.service ? " for " + scope.service : ""}`),
    h("p", {}, "A session is the traces that carry the same session id: the turns of one conversation. "
      + "Set session.id (and user.id) on the root span of each request and its conversations show here."),
    h("pre", {}, [
      "with tracer.start_as_current_span(\"rag.request\") as span:",
      "    span.set_attributes({\"session.id\": conversation_id, \"user.id\": user_id})",
    ].join("\n")),
    h("p", { class: "muted" }, "The other keys read (gen_ai.conversation.id, langfuse.session.id, ...) are in docs/sessions.md. ",
      h("a", { href: "#/traces" }, "The traces of this window")));
}

async function sessionsPage(params) {
  const filters = {};
  for (const key of SESSION_FILTERS) if (params.get(key)) filters[key] = params.get(key);
  const query = { since: scope.since, service: scope.service, limit: 50, ...filters };
  const [info, page] = await Promise.all([scopeInfo(), api("sessions", query)]);
  const set = (changes) => go("/sessions", { ...filters, offset: null, ...changes });
  const sort = filters.sort || "worst";
  const order = filters.order || "desc";
  const select = (name, label, value, options, onchange) => h("label", {}, label,
    h("select", { name, onchange },
      options.map(([v, text]) => h("option", { value: v, selected: value === v }, text))));
  const userInput = h("input", { name: "user", type: "search", value: filters.user || "", placeholder: "a user id" });
  const form = h("form", { class: "filters", id: "session-filters",
    onsubmit: (e) => { e.preventDefault(); set({ user: userInput.value.trim() }); } },
    select("status", "status", filters.status || "", [["", "all"], ["open", "open"], ["ended", "ended"]], (e) => set({ status: e.target.value })),
    select("sort", "sort by", sort, SESSION_SORTS, (e) => set({ sort: e.target.value, order: null })),
    select("order", "order", order, [["desc", SESSION_ORDERS[sort] ? SESSION_ORDERS[sort][0] : "descending"],
      ["asc", SESSION_ORDERS[sort] ? SESSION_ORDERS[sort][1] : "ascending"]], (e) => set({ order: e.target.value })),
    h("label", {}, "user", userInput),
    h("button", { type: "submit" }, "Apply"),
    Object.keys(filters).length ? h("button", { type: "button", onclick: () => go("/sessions", {}) }, "Clear") : null);

  const out = [h("h1", {}, "Sessions"), form];
  const chrome = ["sessions", info.services];
  const narrowed = filters.status || filters.user || filters.offset;
  if (!page.total && !narrowed) {
    out.push(sessionsEmptyState());
    return { chrome, content: out };
  }
  const from = page.sessions.length ? page.offset + 1 : 0;
  const to = page.offset + page.sessions.length;
  out.push(h("p", { class: "muted", id: "session-count" }, page.sessions.length || !page.offset
    ? `${fmtNum(from)}–${fmtNum(to)} of ${fmtNum(page.total)} sessions active in the last ${scope.since}`
    : `Past the last page: ${fmtNum(page.total)} sessions in all.`));
  if (page.sessions.length) {
    out.push(sessionsTable(page.sessions));
  } else if (page.offset) {
    out.push(h("button", { id: "first", onclick: () => set({}) }, "Back to the first page"));
  } else {
    out.push(h("div", { class: "panel empty" }, "No session matches these filters."));
  }
  out.push(pager(page, set, "← previous", "next →"));
  return { chrome, content: out };
}

// ---------------------------------------------------------------- one session

/** GET /api/sessions/{id}: `{session, turns}`, or `{status, error}` for a 404 (no such session) and a
 * 400 (its id under several services, or a bad id); any other error is thrown, as `api` does. */
async function fetchSession(sessionId, service) {
  try {
    return await api(`sessions/${encodeURIComponent(sessionId)}`, { service });
  } catch (exc) {
    if (exc instanceof ApiError && (exc.status === 404 || exc.status === 400)) return { status: exc.status, error: exc.reason };
    throw exc;
  }
}

/** The services an id exists under, from the 400's message
 * (`service: session ID exists under several services (A, B)`); [] when it is another message. */
function servicesOfAmbiguous(message) {
  const marker = " exists under several services (";
  const at = message.lastIndexOf(marker);
  if (at < 0 || !message.endsWith(")")) return [];
  return message.slice(at + marker.length, -1).split(", ").filter(Boolean);
}

function sessionProblem(sessionId, service, answer) {
  const back = h("a", { href: "#/sessions" }, "Every session");
  if (answer.status === 404) {
    return h("div", { class: "panel empty", id: "session-missing", role: "alert" },
      h("h2", {}, `No session ${sessionId}${service ? ` under service ${service}` : ""}`),
      service
        ? h("p", {}, `No stored trace of service ${service} carries this session id. `,
          h("a", { href: sessionHref(sessionId, "") }, "This id under any service"))
        : h("p", {}, "No stored trace carries this session id: it is mistyped, or retention deleted its turns."),
      h("p", { class: "muted" }, "The API answered: ", answer.error), back);
  }
  const services = servicesOfAmbiguous(answer.error);
  return h("div", { class: "banner err", id: "session-ambiguous", role: "alert" },
    services.length
      ? [h("p", {}, `Session ${sessionId} exists under several services: pick one.`),
        h("ul", { id: "session-services" }, services.map((s) => h("li", {}, h("a", { href: sessionHref(sessionId, s), "data-service": s }, s))))]
      : null,
    h("p", { class: "muted" }, "The API answered: ", answer.error), back);
}

/** Each score name's mean and failures over the session's turns (ragpulse's own scores). */
function sessionScoresTable(session) {
  const means = session.score_means || {};
  const fails = session.score_fails || {};
  const names = [...new Set([...Object.keys(means), ...Object.keys(fails)])].sort();
  if (!names.length) return h("p", { class: "muted" }, "No score of ragpulse's evaluators applied to its turns yet.");
  return h("table", { id: "session-scores", class: "compact" },
    h("thead", {}, h("tr", {}, h("th", {}, "score"), h("th", { class: "num" }, "mean"), h("th", { class: "num" }, "failed"))),
    h("tbody", {}, names.map((name) => h("tr", { "data-score": name },
      h("td", {}, name), h("td", { class: "num" }, fmtNum(means[name])), badCount(fails[name] || 0)))));
}

/** A turn's scores as badges: failed and errored first, then by name; skipped ones only counted. */
function turnScores(scores) {
  const order = { fail: 0, error: 1, pass: 2 };
  const shown = (scores || []).filter((s) => s.status !== "skipped")
    .sort((a, b) => (order[a.status] ?? 3) - (order[b.status] ?? 3) || a.name.localeCompare(b.name));
  const skipped = (scores || []).length - shown.length;
  return h("div", { class: "case-scores turn-scores" },
    shown.map((s) => h("span", { class: `badge ${s.status || "none"}${s.ours ? "" : " theirs"}`, "data-score": s.name, "data-status": s.status,
      title: `${s.name}: ${s.status}, value ${fmtNum(s.value)} · ${s.evaluator}${s.ours ? "" : " (not in the session's figures)"}` },
    `${s.name} ${fmtNum(s.value, 2)}`)),
    skipped ? h("span", { class: "muted small" }, `${skipped} skipped`) : null,
    !(scores || []).length ? h("span", { class: "muted small" }, "no score yet") : null);
}

// The API sends the first 2,000 characters of a question or an answer.
const TURN_TEXT_LIMIT = 2000;

function turnText(text, traceId) {
  if (!text) return "—";
  return [text, text.length >= TURN_TEXT_LIMIT
    ? h("div", { class: "muted small" }, "(the first 2,000 characters: ", h("a", { href: `#/trace/${traceId}` }, "the whole text"), ")") : null];
}

function turnView(t, session) {
  const failed = (t.scores || []).some((s) => s.ours && s.status === "fail");
  return h("li", { class: `panel turn${failed ? " failed" : ""}`, "data-turn": t.turn, "data-trace": t.trace_id },
    h("div", { class: "turn-head" },
      h("b", {}, `Turn ${t.turn}`),
      h("span", {}, fmtTime(t.start_time)),
      h("span", {}, fmtMs(t.duration_ms)),
      t.user_id && t.user_id !== session.user_id ? h("span", {}, "user ", h("b", {}, t.user_id)) : null,
      t.status && t.status !== "ok" ? badge(t.status) : null,
      failed ? h("span", { class: "badge fail" }, "failed turn") : null,
      h("a", { class: "trace-link", href: `#/trace/${t.trace_id}` }, "trace →")),
    h("div", { class: "qa" },
      h("div", { class: "k" }, "question"), h("div", { class: "question" }, turnText(t.question, t.trace_id)),
      h("div", { class: "k" }, "answer"), h("div", { class: "answer" }, turnText(t.answer, t.trace_id)),
      h("div", { class: "k" }, "scores"), turnScores(t.scores)));
}

function sessionView(d) {
  const s = d.session;
  const out = [];
  out.push(h("div", { class: "meta", id: "session-meta" },
    h("span", {}, "session ", h("code", {}, s.session_id)),
    h("span", {}, "service ", h("b", {}, s.service_name || "—")),
    h("span", {}, "user ", s.user_id ? h("a", { href: `#/sessions?user=${encodeURIComponent(s.user_id)}`, title: `the sessions of ${s.user_id}` }, h("b", {}, s.user_id)) : h("b", {}, "—")),
    h("span", {}, "status ", badge(s.status)),
    h("span", {}, "started ", h("b", {}, fmtTime(s.started_at))),
    h("span", {}, "last activity ", h("b", {}, fmtTime(s.last_activity)))));
  const kpi = (label, value, bad) => h("div", { class: `kpi${bad ? " bad" : ""}`, "data-kpi": label }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
  out.push(h("div", { class: "session-top" },
    h("div", { class: "kpis", id: "session-kpis" },
      kpi("turns", fmtNum(s.turns)), kpi("failed turns", fmtNum(s.failed_turns), s.failed_turns > 0), kpi("mean score", fmtNum(s.mean_score))),
    h("div", { class: "panel session-scores" }, h("h3", {}, "Scores over its turns"), sessionScoresTable(s))));
  out.push(h("h2", {}, `Turns (${fmtNum(d.turns.length)})`));
  out.push(d.turns.length
    ? h("ol", { class: "turns", id: "session-turns" }, d.turns.map((t) => turnView(t, s)))
    : h("p", { class: "muted" }, "No turn."));
  return out;
}

async function sessionPage(sessionId, params) {
  const service = params.get("service") || "";
  const answer = await fetchSession(sessionId, service);
  const title = h("h1", {}, "Session");
  if (answer.error) return { chrome: ["sessions", []], content: [title, sessionProblem(sessionId, service, answer)] };
  return { chrome: ["sessions", []], content: [title, h("div", { id: "session-view" }, ...sessionView(answer))] };
}
