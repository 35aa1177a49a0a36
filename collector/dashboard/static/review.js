/* ragpulse dashboard: people's verdicts on ragpulse's scores (docs/feedback.md).
 *
 * - In a trace's view, each score ragpulse gave (pass or fail) gets "agree" and "disagree", and each
 *   claim of a score that has claims a mark to flip: the reviewer's verdict, sent to
 *   POST /api/annotations (a key with the `annotate` scope).
 * - The Review page (#/review) serves traces from the two queues of GET /api/review: `random` (the
 *   unbiased sample agreement is estimated on) and `contested`; each verdict moves on to the next.
 * - Everything works from the keyboard: j / k move between scores, a / d agree / disagree, 1-9 flip
 *   a claim, c writes a comment, n skips to the next trace, ? shows the keys.
 *
 * Loaded before app.js, whose helpers (h, api, badge, fmtNum, traceView, ...) it calls at run time.
 */
"use strict";

const REVIEW_KEYS = [
  ["j / ↓", "next score"], ["k / ↑", "previous score"], ["a", "agree with the score"],
  ["d", "disagree with the score"], ["1 – 9", "flip the verdict on claim 1 – 9 (then a or d)"],
  ["c", "write a comment"], ["n", "next trace (Review page)"], ["?", "show or hide these keys"],
];
const reviewer = {
  get name() { return localStorage.getItem("ragpulse.reviewer") || ""; },
  set name(v) { localStorage.setItem("ragpulse.reviewer", v); },
};

/** Whether people can give a verdict on this score: one of ragpulse's, with a pass or a fail. */
function reviewable(score) {
  return (score.evaluator === "judge" || score.evaluator === "deterministic")
    && (score.status === "pass" || score.status === "fail");
}

async function postAnnotation(body) {
  let response;
  try {
    response = await fetch("/api/annotations", {
      method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
    });
  } catch (exc) {
    throw new ApiError(`cannot reach ragpulse: ${exc.message}`);
  }
  let answer = null;
  try { answer = await response.json(); } catch (_) { /* reported below */ }
  if (response.status === 401 || response.status === 403) {
    throw new ApiError("this key cannot record verdicts: it needs the annotate scope");
  }
  if (!response.ok) throw new ApiError(`${response.status} ${(answer && answer.error) || response.statusText}`);
  return answer;
}

/**
 * The review controls of one trace's view. `served`: on the Review page, `{queue, name}`, the queue
 * the trace was drawn from and the score it was drawn for: a verdict on that score records the queue;
 * a verdict on any other score of the trace records none, since the reviewer chose to give it (only
 * draws count in the unbiased estimate). Null for a trace opened by hand. `onVerdict(score, first)`
 * runs after each verdict is stored (`first`: the reviewer had none on that score before).
 */
class TraceReview {
  constructor(detail, served = null, onVerdict = null) {
    this.traceId = detail.trace.trace_id;
    this.served = served;
    this.onVerdict = onVerdict;
    this.busy = false;         // a verdict on its way: another key press waits for it
    this.panels = [];          // the reviewable scores' panels, in page order
    this.drafts = new Map();   // score name -> Map(claim index -> ok), the reviewer's flips
    this.mine = new Map();     // score name -> this reviewer's latest verdict
    for (const a of detail.annotations || []) {
      // "anonymous": the author the API records for a verdict that names none.
      if (a.author === (reviewer.name || "anonymous") && !this.mine.has(a.name)) this.mine.set(a.name, a);
    }
  }

  /** The verdict bar under a score (null for a score people cannot judge). */
  controls(score) {
    if (!reviewable(score)) return null;
    const status = h("span", { class: "verdict-status muted" });
    const comment = h("input", { class: "verdict-comment", type: "text", placeholder: "comment (c)", maxlength: 10000 });
    const bar = h("div", { class: "verdict", "data-verdict": score.name },
      h("button", { class: "agree", title: "Agree (a)", onclick: () => this.submit(score, true) }, "✓ agree (a)"),
      h("button", { class: "disagree", title: "Disagree (d)", onclick: () => this.submit(score, false) }, "✗ disagree (d)"),
      comment, status);
    bar._score = score;
    this.showVerdict(bar, this.mine.get(score.name));
    return bar;
  }

  /** The reviewer's mark on claim `index` of a score: shows the judge's verdict until flipped. */
  claim(score, index, item) {
    if (!reviewable(score)) return null;
    return h("button", { class: "claim-flip", "data-index": index, title: `Flip the verdict on claim ${index + 1} (${index + 1})`,
      onclick: (e) => { e.preventDefault(); this.flip(score, index); } }, `${index + 1}`);
  }

  /** Called once the view is in the page: collects the panels, focuses the first, takes the keys. */
  attach(root) {
    this.root = root;
    if (!root.isConnected) return; // the page moved on before this view was drawn
    this.panels = [...root.querySelectorAll("details.score")].filter((p) => p.querySelector(".verdict"));
    this.panels.forEach((p) => p.setAttribute("tabindex", "-1"));
    this.focus(0);
    installReviewKeys(this);
  }

  focus(i) {
    if (!this.panels.length) return;
    this.current = Math.max(0, Math.min(this.panels.length - 1, i));
    this.panels.forEach((p, j) => p.classList.toggle("focused", j === this.current));
    const panel = this.panels[this.current];
    panel.open = true;
    panel.focus({ preventScroll: true });
    panel.scrollIntoView({ block: "nearest" });
  }

  focusedScore() {
    const panel = this.panels[this.current];
    return panel ? panel.querySelector(".verdict")._score : null;
  }

  flip(score, index) {
    const items = score.items || [];
    if (index >= items.length) return;
    const draft = this.drafts.get(score.name) || new Map();
    if (draft.has(index)) draft.delete(index); else draft.set(index, !items[index].ok);
    this.drafts.set(score.name, draft);
    const panel = this.panels.find((p) => p.querySelector(".verdict")._score === score);
    const li = panel && panel.querySelectorAll(".claims li")[index];
    if (li) {
      li.classList.toggle("flipped", draft.has(index));
      li.querySelector(".claim-flip").textContent = draft.has(index) ? `${index + 1} · you ${draft.get(index) ? "✓" : "✗"}` : `${index + 1}`;
    }
  }

  async submit(score, agree) {
    if (this.busy) return;
    this.busy = true;
    const panel = this.panels.find((p) => p.querySelector(".verdict")._score === score);
    const bar = panel.querySelector(".verdict");
    const draft = this.drafts.get(score.name) || new Map();
    const items = score.items || [];
    const body = {
      trace_id: this.traceId, name: score.name,
      human_status: agree ? score.status : (score.status === "pass" ? "fail" : "pass"),
      author: reviewer.name || undefined,
      queue: this.served && score.name === this.served.name ? this.served.queue : undefined,
      comment: bar.querySelector(".verdict-comment").value.trim() || undefined,
    };
    if (items.length) body.claims = items.map((item, index) => ({ index, ok: draft.has(index) ? draft.get(index) : !!item.ok }));
    const status = bar.querySelector(".verdict-status");
    status.textContent = "saving…";
    try {
      const stored = await postAnnotation(body);
      const first = !this.mine.has(score.name);
      this.mine.set(score.name, stored);
      this.showVerdict(bar, stored);
      // On the Review page a verdict on the served score moves on: keys wait for the next trace.
      if (this.onVerdict && this.onVerdict(score, first)) return;
      if (!this.onVerdict) this.focus(this.current + 1);
    } catch (exc) {
      status.replaceChildren(h("span", { class: "bad" }, exc.message));
    }
    this.busy = false;
  }

  showVerdict(bar, verdict) {
    const status = bar.querySelector(".verdict-status");
    bar.classList.remove("agreed", "disagreed");
    if (!verdict) { status.textContent = ""; return; }
    const agreed = verdict.human_status === bar._score.status;
    bar.classList.add(agreed ? "agreed" : "disagreed");
    status.replaceChildren(`your verdict: ${agreed ? "agree" : "disagree"} `, badge(verdict.human_status));
  }
}

let reviewKeys = null;

/** One keyboard handler for the review in the page (a new view replaces the last one's). */
function installReviewKeys(review) {
  if (reviewKeys) document.removeEventListener("keydown", reviewKeys);
  reviewKeys = (e) => {
    if (!review.root || !review.root.isConnected) return; // the page moved on
    const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement || e.target instanceof HTMLSelectElement;
    if (typing) {
      if (e.key === "Escape") e.target.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return; // a held key sends one verdict
    const score = review.focusedScore();
    const act = {
      j: () => review.focus(review.current + 1), ArrowDown: () => review.focus(review.current + 1),
      k: () => review.focus(review.current - 1), ArrowUp: () => review.focus(review.current - 1),
      a: () => score && review.submit(score, true), d: () => score && review.submit(score, false),
      c: () => score && review.panels[review.current].querySelector(".verdict-comment").focus(),
      n: () => review.onVerdict && review.skip && review.skip(),
      "?": () => document.querySelectorAll(".review-keys").forEach((k) => { k.hidden = !k.hidden; }),
    }[e.key];
    if (act) { e.preventDefault(); act(); return; }
    if (score && /^[1-9]$/.test(e.key)) { e.preventDefault(); review.flip(score, Number(e.key) - 1); }
  };
  document.addEventListener("keydown", reviewKeys);
}

function reviewKeysHelp(hidden = true) {
  return h("div", { class: "panel review-keys", hidden },
    h("b", {}, "Keys "), REVIEW_KEYS.map(([k, what]) => h("span", { class: "key" }, h("kbd", {}, k), ` ${what}`)));
}

// ---------------------------------------------------------------- agreement

function agreementTable(report) {
  const rows = report.evaluators || [];
  if (!rows.length) {
    return h("p", { class: "muted" }, "No verdicts from the random queue in this window yet: label a few traces below, and the agreement of each evaluator with people appears here.");
  }
  const interval = (r) => (r.kappa === null ? "—" : `${fmtNum(r.kappa, 2)} [${fmtNum(r.kappa_low, 2)}, ${fmtNum(r.kappa_high, 2)}]`);
  return h("table", { id: "agreement" },
    h("thead", {}, h("tr", {}, ["score", "judge", "prompt", "n", "agreement", "κ [95 % interval]", "judge pass · people fail", "judge fail · people pass", "other verdicts"]
      .map((c) => h("th", { class: ["n", "agreement", "other verdicts"].includes(c) ? "num" : null }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {},
      h("td", {}, r.name), h("td", {}, r.model || (r.evaluator === "judge" ? "judge, no call" : "deterministic")),
      h("td", {}, r.prompt_version || "—"),
      h("td", { class: "num" }, r.n), h("td", { class: "num" }, fmtPct(r.agreement)),
      h("td", { class: `num${r.kappa !== null && r.kappa < 0.4 ? " bad" : ""}` }, interval(r)),
      h("td", { class: "num" }, r.confusion.pass_fail), h("td", { class: "num" }, r.confusion.fail_pass),
      h("td", { class: "num" }, r.n_other)))));
}

/** Whether each score predicts users' feedback: its AUC against a feedback name, with DeLong's interval. */
function feedbackAucTable(report) {
  const rows = report.scores || [];
  if (!rows.length) return h("p", { class: "muted" }, `No pass or fail feedback ${report.feedback} on scored traces in this window.`);
  return h("table", { id: "feedback-auc" },
    h("thead", {}, h("tr", {}, ["score", `${report.feedback} pass`, `${report.feedback} fail`, "AUC [95 % interval]"]
      .map((c, i) => h("th", { class: i ? "num" : null }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {},
      h("td", {}, r.name), h("td", { class: "num" }, r.n_positive), h("td", { class: "num" }, r.n_negative),
      h("td", { class: "num" }, r.auc === null ? "—" : `${fmtNum(r.auc, 2)} [${fmtNum(r.auc_low, 2)}, ${fmtNum(r.auc_high, 2)}]`)))));
}

// ---------------------------------------------------------------- the Review page

const QUEUE_TEXT = {
  random: "A uniform random sample of the traces this score was given on: the verdicts here are what agreement is estimated on.",
  contested: "Borderline and disputed scores (near the threshold, or a user or another reviewer said otherwise): worth a look, kept out of the estimate.",
};

/** "Does a score matter to users": the AUC table for one feedback name (a picker when there are several). */
async function feedbackPanel(names, chosen) {
  if (!names.length) return [];
  const name = names.includes(chosen) ? chosen : names[0];
  const report = await api("agreement", { since: scope.since, service: scope.service, feedback: name });
  const { params } = route();
  const pick = h("select", { id: "feedback-name", onchange: (e) => go("/review", { ...Object.fromEntries(params.entries()), feedback: e.target.value }) },
    names.map((n) => h("option", { value: n, selected: n === name }, n)));
  return [h("h2", {}, "Does a score predict users' feedback? ", pick),
    h("p", { class: "muted" }, "AUC: the chance that a trace users gave a fail scores below one they gave a pass (0.5: the score tells nothing; 1: it always does)."),
    feedbackAucTable(report)];
}

async function reviewPage(params) {
  const queue = params.get("queue") === "contested" ? "contested" : "random";
  const query = { since: scope.since, service: scope.service, queue, name: params.get("name"), author: reviewer.name, limit: 20 };
  const [served, agreement] = await Promise.all([api("review", query), api("agreement", { since: scope.since, service: scope.service })]);
  const name = served.name;
  const head = [h("h1", {}, "Review"),
    h("div", { class: "filters" },
      h("label", {}, "score", h("select", { id: "review-score", onchange: (e) => go("/review", { name: e.target.value, queue }) },
        served.names.map((n) => h("option", { value: n.name, selected: n.name === name },
          `${n.name} (${fmtNum(n.traces)} traces${n.judged ? ", judge" : ""})`)))),
      h("label", {}, "queue", h("select", { id: "review-queue", onchange: (e) => go("/review", { name, queue: e.target.value }) },
        ["random", "contested"].map((q) => h("option", { value: q, selected: q === queue }, q)))),
      h("label", {}, "reviewer", h("input", { id: "reviewer", type: "text", value: reviewer.name, placeholder: "your name", maxlength: 200,
        onchange: (e) => { reviewer.name = e.target.value.trim(); render(); } }))),
    h("p", { class: "muted" }, QUEUE_TEXT[queue]),
    h("h2", {}, "Agreement with people"), agreementTable(agreement),
    ...await feedbackPanel(served.feedback_names, params.get("feedback")),
    reviewKeysHelp(false)];
  if (!name) {
    return { chrome: ["review", []], content: [...head, h("div", { class: "panel empty" }, "No score in this window can be reviewed yet.")] };
  }
  const holder = h("div", { id: "review-trace" });
  const count = h("h2", { id: "review-count" });
  const queued = [...served.traces];
  let left = served.remaining;
  const counted = () => {
    count.textContent = left ? `${fmtNum(left)} trace${left === 1 ? "" : "s"} to label for ${name}` : `Nothing left to label for ${name} in this queue`;
  };
  counted();
  const next = async () => {
    const item = queued.shift();
    counted();
    if (!item) {
      holder.replaceChildren(h("div", { class: "panel empty" }, left ? "Fetching more…" : "Every trace of this queue has your verdict. Try the other queue or a longer time range."));
      if (left) render();
      return;
    }
    holder.replaceChildren(h("p", { class: "muted" }, "Loading the next trace…"));
    const detail = await api(`traces/${encodeURIComponent(item.trace_id)}`);
    if (!holder.isConnected) return; // the page moved on meanwhile
    const review = new TraceReview(detail, { queue, name }, (score, first) => {
      if (score.name !== name) return false; // a verdict on another score of the trace: stay
      if (first) left -= 1;
      setTimeout(next, 250);
      return true;
    });
    review.skip = () => next();
    holder.replaceChildren(...[
      item.reason ? h("p", { class: "banner reason" }, h("b", {}, "Why it is here: "), item.reason) : null,
      h("p", { class: "muted" }, h("a", { href: `#/trace/${item.trace_id}` }, "open this trace on its own"), " · n skips it"),
      ...traceView(detail, review)].filter(Boolean));
    review.attach(holder);
    const own = review.panels.findIndex((p) => p.querySelector(".verdict")._score.name === name);
    review.focus(Math.max(0, own));
  };
  setTimeout(next, 0);
  return { chrome: ["review", []], content: [...head, count, holder] };
}
