// The console page: every few seconds it reads /v1/config (the rules), /metrics (the
// service's own decision counters, and the RLQS streams and buckets), /v1/history (the
// same counters over the last minutes, drawn as charts) and /v1/top (the denied keys),
// and turns counter differences into rates; its forms ask /v1/explain and
// /v1/rlqs/explain. Everything a client chose (keys, values) is written as text,
// never as HTML.
"use strict";

const REFRESH_MS = 2000;
const FAMILIES = new Set([
  "spillway_decisions_total",
  "spillway_candidate_decisions_total",
  "spillway_candidate_disagreements_total",
  "spillway_candidate_dropped_total",
]);

/** The columns of a rule table (live and candidate): a heading, and its class. */
const RULE_COLUMNS = [
  ["domain", ""],
  ["rule", ""],
  ["limit", ""],
  ["decisions/s", "num"],
  ["over limit", "num"],
  ["decisions", "num"],
  ["over limit, all", "num"],
];

const $ = (id) => document.getElementById(id);
let previous = null; // the last reading: { at, counts }

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

/** Prometheus text → the samples of FAMILIES, as { name, labels, value }. */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || !FAMILIES.has(m[1])) continue;
    const labels = {};
    const pair = /(\w+)="((?:[^"\\]|\\.)*)"/g;
    for (let l; (l = pair.exec(m[2] || "")); ) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

const ruleId = (domain, rule, slot) => `${domain}\u0000${rule}\u0000${slot}`;

/** Decisions (and how many were over the limit) per rule, and disagreements per domain. */
function count(samples) {
  const counts = { live: new Map(), candidate: new Map(), disagree: new Map(), dropped: 0 };
  const add = (map, id, total, over) => {
    const c = map.get(id) || { total: 0, over: 0 };
    c.total += total;
    c.over += over;
    map.set(id, c);
  };
  for (const s of samples) {
    const l = s.labels;
    if (s.name === "spillway_candidate_dropped_total") {
      counts.dropped += s.value;
      continue;
    }
    if (s.name === "spillway_candidate_disagreements_total") {
      add(counts.disagree, `${l.domain}\u0000${l.kind}`, s.value, 0);
      continue;
    }
    const map = s.name === "spillway_decisions_total" ? counts.live : counts.candidate;
    add(map, ruleId(l.domain, l.rule, l.limit || ""), s.value, l.outcome === "ok" ? 0 : s.value);
  }
  return counts;
}

const integer = new Intl.NumberFormat("en");
const percent = (part, whole) => (whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : "–");

const plural = (n, word) => `${integer.format(n)} ${word}${n === 1 ? "" : "s"}`;

function rate(now, before, seconds) {
  if (before === null || before === undefined || seconds <= 0) return "–";
  const r = (now - before) / seconds;
  return r >= 100 ? integer.format(Math.round(r)) : r.toFixed(1);
}

/** One rule's row: its settings, then its counters now and since the last reading. */
function ruleRow(domain, rule, now, before, seconds) {
  const c = now || { total: 0, over: 0 };
  const b = before || (previous ? { total: 0, over: 0 } : null);
  const dTotal = b ? c.total - b.total : 0;
  const dOver = b ? c.over - b.over : 0;
  return el(
    "tr",
    { "data-rule": `${domain}/${rule.path}${rule.slot}`, "data-total": c.total, "data-over": c.over },
    el("td", {}, domain),
    el(
      "td",
      {},
      el("code", {}, rule.path + rule.slot),
      rule.mode === "shadow" ? el("span", { class: "tag" }, "shadow") : null,
      rule.quota_mode ? el("span", { class: "tag" }, "quota") : null,
    ),
    el("td", { class: "limit" }, rule.description),
    el("td", { class: "num rate" }, rate(c.total, b && b.total, seconds)),
    el(
      "td",
      { class: `num ${dOver > 0 ? "over" : ""}` },
      b ? percent(dOver, dTotal) : "–",
    ),
    el("td", { class: "num total" }, integer.format(c.total)),
    el("td", { class: `num ${c.over > 0 ? "over" : ""}` }, percent(c.over, c.total)),
  );
}

function fillRules(tbody, domains, now, before, seconds) {
  const rows = [];
  for (const d of domains) {
    for (const rule of d.rules) {
      const id = ruleId(d.domain, rule.path, rule.slot);
      rows.push(ruleRow(d.domain, rule, now.get(id), before && before.get(id), seconds));
    }
  }
  if (rows.length === 0) rows.push(el("tr", { class: "empty" }, el("td", { colspan: RULE_COLUMNS.length }, "no rules loaded")));
  tbody.replaceChildren(...rows);
}

/** Keeps a select's options equal to `names`, and its choice if it still exists. */
function fillSelect(select, names) {
  const current = [...select.options].map((o) => o.value);
  if (current.join("\u0000") === names.join("\u0000")) return;
  const chosen = select.value;
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(chosen)) select.value = chosen;
}

function fillCandidate(config, counts, before, seconds) {
  const candidate = config.candidate;
  const note = $("candidate-note");
  const tables = [$("disagreements"), $("candidate-rules")];
  if (!candidate) {
    note.replaceChildren("No candidate set. Start the service with ", el("code", {}, "--candidate-config DIR"), " to try policies on live traffic.");
    tables.forEach((t) => (t.hidden = true));
    return;
  }
  tables.forEach((t) => (t.hidden = false));
  note.replaceChildren(
    candidate.last_load_error
      ? el("span", { class: "error" }, `The last load failed: ${candidate.last_load_error}`)
      : `${plural(candidate.domains.length, "domain")}, loaded ${plural(candidate.loads, "time")}; ` +
          `${plural(counts.dropped, "request")} not decided (the candidate runs on idle CPU and drops what it cannot keep up with).`,
  );
  const rows = candidate.domains.map((d) => {
    const cell = (kind) => {
      const id = `${d.domain}\u0000${kind}`;
      const now = (counts.disagree.get(id) || { total: 0 }).total;
      const was = before ? (before.disagree.get(id) || { total: 0 }).total : null;
      return [
        el("td", { class: `num ${now > 0 ? "over" : ""}`, "data-kind": kind }, integer.format(now)),
        el("td", { class: "num" }, rate(now, was, seconds)),
      ];
    };
    return el("tr", { "data-domain": d.domain }, el("td", {}, d.domain), cell("would_deny"), cell("would_admit"));
  });
  $("disagreements").tBodies[0].replaceChildren(...rows);
  fillRules($("candidate-rules").tBodies[0], candidate.domains, counts.candidate, before && before.candidate, seconds);
}

const SVG = "http://www.w3.org/2000/svg";

/** An SVG element with attributes and children (text as text nodes). */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const shortRate = (r) => (r >= 1000 ? `${(r / 1000).toFixed(1)}k` : r >= 10 ? Math.round(r) : r.toFixed(1));

/**
 * One chart: `lines` ({ cls, label, values, attrs? }) over `at` (ms) in the last `minutes`
 * (or since `since`, for a service younger than that), on one scale from 0 to the
 * highest value. `attrs` go on the <svg> (what tests select).
 */
function chart(title, attrs, lines, at, minutes, since) {
  const W = 330, H = 96, left = 34, right = 6, top = 16, bottom = 14;
  const end = at.length > 0 ? at[at.length - 1] : Date.now();
  const start = Math.min(end - 10000, Math.max(end - minutes * 60000, since || 0));
  const span = (end - start) / 1000;
  const ago = span >= 120 ? `−${Math.round(span / 60)} min` : `−${Math.round(span)} s`;
  const max = Math.max(0, ...lines.flatMap((l) => l.values));
  const scale = max > 0 ? max : 1;
  const x = (t) => (left + ((t - start) / (end - start)) * (W - left - right)).toFixed(1);
  const y = (v) => (top + (1 - v / scale) * (H - top - bottom)).toFixed(1);
  const points = at.length;
  return svg(
    "svg",
    { ...attrs, class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "data-points": points, "data-max": max },
    svg("title", {}, `${title}: ${lines.map((l) => l.label).join(", ")} per second, last ${minutes} minutes`),
    svg("text", { class: "title", x: left, y: 11 }, title),
    svg("line", { class: "axis", x1: left, y1: H - bottom, x2: W - right, y2: H - bottom }),
    svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: H - bottom }),
    svg("text", { x: left - 3, y: top + 4, "text-anchor": "end" }, max > 0 ? shortRate(max) : "0"),
    svg("text", { x: left - 3, y: H - bottom, "text-anchor": "end" }, "0"),
    svg("text", { x: left, y: H - 2 }, ago),
    svg("text", { x: W - right, y: H - 2, "text-anchor": "end" }, points > 0 ? "now" : "no decisions yet"),
    lines.map((l) =>
      svg("polyline", {
        ...l.attrs,
        class: l.cls,
        points: l.values.map((v, i) => `${x(at[i])},${y(v)}`).join(" "),
        "data-max": Math.max(0, ...l.values),
      }),
    ),
  );
}

/** The charts of every loaded rule, and of the candidate's disagreements per domain. */
function fillCharts(history, config) {
  $("chart-minutes").textContent = history.minutes;
  const series = new Map(history.rules.map((r) => [ruleId(r.domain, r.rule, r.limit), r]));
  const none = history.at_ms.map(() => 0);
  const charts = [];
  for (const d of config.domains) {
    for (const rule of d.rules) {
      const s = series.get(ruleId(d.domain, rule.path, rule.slot));
      const name = `${d.domain}/${rule.path}${rule.slot}`;
      charts.push(
        chart(name, { "data-rule": name }, [
          { cls: "decisions", label: "decisions", values: s ? s.decisions_per_s : none },
          { cls: "over", label: "over the limit", values: s ? s.over_limit_per_s : none },
        ], history.at_ms, history.minutes, history.since_ms),
      );
    }
  }
  $("charts").replaceChildren(...charts);
  $("share-charts").replaceChildren(...history.shares.map((s) => shareCharts(s, history)));
  const candidate = config.candidate;
  const disagree = new Map(history.candidate.map((c) => [c.domain, c]));
  $("candidate-charts").replaceChildren(
    ...(candidate ? candidate.domains : []).map((d) => {
      const s = disagree.get(d.domain);
      return chart(`${d.domain}: disagreements`, { "data-domain": d.domain }, [
        { cls: "would_deny", label: "would deny", values: s ? s.would_deny_per_s : none },
        { cls: "would_admit", label: "would admit", values: s ? s.would_admit_per_s : none },
      ], history.at_ms, history.minutes, history.since_ms);
    }),
  );
}

/** A child's line colour: the same child keeps its colour from one refresh to the next. */
const CHILD_COLOURS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#475569"];

/**
 * A `shares` rule's parent and children over time: what the parent served (admitted
 * at once or after a wait), in all and per child; what each child borrowed of it (past
 * its guarantee, from what the others left); and what it refused per child (who was
 * shed, lowest priority first).
 */
function shareCharts(s, history) {
  const name = `${s.domain}/${s.rule}${s.limit}`;
  const sum = (...series) => history.at_ms.map((_, i) => series.reduce((t, v) => t + v[i], 0));
  const served = s.children.map((c) => sum(c.admitted_per_s, c.waited_per_s));
  const line = (c, i, values) => ({
    cls: "child",
    label: c.child,
    values: values.map((v) => Math.round(v * 10) / 10),
    attrs: { "data-child": c.child, stroke: CHILD_COLOURS[i % CHILD_COLOURS.length] },
  });
  // Coloured through the CSSOM: the page's CSP refuses style attributes.
  const swatch = (c, i) => {
    const span = el("span", { "data-child": c.child }, c.child);
    span.style.color = CHILD_COLOURS[i % CHILD_COLOURS.length];
    return span;
  };
  const legend = el("p", { class: "legend" }, "parent", ...s.children.map((c, i) => [" · ", swatch(c, i)]));
  return el("div", { class: "share", "data-rule": name },
    chart(`${name}: served/s`, { "data-rule": name, "data-kind": "served" }, [
      { cls: "parent", label: "parent", values: sum(...served).map((v) => Math.round(v * 10) / 10) },
      ...s.children.map((c, i) => line(c, i, served[i])),
    ], history.at_ms, history.minutes, history.since_ms),
    chart(`${name}: borrowed/s`, { "data-rule": name, "data-kind": "borrowed" },
      s.children.map((c, i) => line(c, i, c.borrowed_per_s)), history.at_ms, history.minutes, history.since_ms),
    chart(`${name}: refused/s`, { "data-rule": name, "data-kind": "refused" },
      s.children.map((c, i) => line(c, i, c.refused_per_s)), history.at_ms, history.minutes, history.since_ms),
    legend);
}

async function fillTop() {
  const domain = $("top-domain").value;
  const box = $("top");
  if (!domain) return box.replaceChildren(el("p", { class: "note" }, "no domains loaded"));
  const top = await getJson(`/v1/top?domain=${encodeURIComponent(domain)}`);
  $("top-minutes").textContent = top.minutes;
  const rules = top.rules.filter((r) => r.keys.length > 0);
  if (rules.length === 0) {
    return box.replaceChildren(el("p", { class: "note" }, `No denials in ${domain} in the last ${top.minutes} minutes.`));
  }
  box.replaceChildren(
    ...rules.map((r) =>
      el(
        "div",
        { class: "top-rule" },
        el("h3", {}, r.rule, r.rule !== r.path ? el("small", {}, ` ${r.path}`) : null),
        el(
          "table",
          {},
          el("thead", {}, el("tr", {}, el("th", {}, "key"), el("th", { class: "num" }, "denied"), el("th", { class: "num" }, "± at most"))),
          el(
            "tbody",
            {},
            r.keys.map((k) =>
              el("tr", {}, el("td", { class: "key" }, k.key), el("td", { class: "num" }, integer.format(k.denied)), el("td", { class: "num" }, integer.format(k.error))),
            ),
          ),
        ),
      ),
    ),
  );
}

async function refresh() {
  const status = $("status");
  try {
    const [config, metrics, history] = await Promise.all([
      getJson("/v1/config"),
      fetch("/metrics", { cache: "no-store" }).then((r) => r.text()),
      getJson("/v1/history"),
    ]);
    const at = performance.now();
    const counts = count(parseMetrics(metrics));
    const seconds = previous ? (at - previous.at) / 1000 : 0;
    const before = previous && previous.counts;
    fillRules($("rules").tBodies[0], config.domains, counts.live, before && before.live, seconds);
    fillCandidate(config, counts, before, seconds);
    fillCharts(history, config);
    const names = config.domains.map((d) => d.domain);
    fillSelect($("top-domain"), names);
    fillSelect($("explain-domain"), names);
    fillSelect($("rlqs-domain"), names);
    fillRlqsNote(metrics);
    previous = { at, counts };
    $("interval").textContent = seconds > 0 ? `rates over the last ${seconds.toFixed(1)} s` : "";
    const rules = config.domains.reduce((n, d) => n + d.rules.length, 0);
    const overridden = config.domains.filter((d) => d.overrides > 0);
    $("overrides").textContent = overridden.length === 0 ? "" :
      "Overrides (limits set by the admin API for exact paths, before these rules): " +
      overridden.map((d) => `${d.domain} ${plural(d.overrides, "path")} (GET /v1/limits/${d.domain})`).join(", ");
    const error = config.last_load_error ? ` · last reload failed: ${config.last_load_error}` : "";
    status.className = error ? "status error" : "status";
    status.textContent = `${plural(names.length, "domain")}, ${plural(rules, "rule")} · policies loaded ${plural(config.loads, "time")}${error} · updated ${new Date().toLocaleTimeString()}`;
    await fillTop();
  } catch (e) {
    status.className = "status error";
    status.textContent = `Cannot read the service: ${e.message}`;
  }
}

/** `key=value key=value` per line → /v1/check's descriptors. */
function descriptors(text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line.length > 0)
    .map((line, i) => ({
      entries: line.split(/\s+/).map((pair) => {
        const eq = pair.indexOf("=");
        if (eq <= 0) throw new Error(`line ${i + 1}: "${pair}" is not key=value`);
        return { key: pair.slice(0, eq), value: pair.slice(eq + 1) };
      }),
    }));
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7200000) return `${Math.round(ms / 60000)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

/** A concurrency rule's holds: in use, and when the oldest lapses. */
function holds(state) {
  if (!state || !state.holds) return null;
  const h = state.holds;
  const lapse = h.oldest_lapses_in_ms === null ? "" : `, the oldest lapses in ${duration(h.oldest_lapses_in_ms)}`;
  return el("div", { class: "holds" }, `${integer.format(h.in_use)} held${lapse}`);
}

function limitRow(l) {
  const limit =
    l.limit === null
      ? ""
      : l.algorithm === "concurrency"
        ? ` ${integer.format(l.limit)} at once, lease ${duration(l.window_ms)}`
        : ` ${integer.format(l.limit)} per ${duration(l.window_ms)}`;
  return el(
    "tr",
    { "data-rule": l.rule, "data-admit": l.would_admit },
    el("td", {}, l.rule, l.replaced_by ? el("span", { class: "tag" }, `replaced by ${l.replaced_by}`) : null),
    el("td", {}, l.algorithm + limit),
    el("td", {}, l.mode, l.quota_mode ? el("span", { class: "tag" }, "quota") : null),
    el("td", { class: "num" }, l.state ? integer.format(l.state.remaining) : "–", holds(l.state)),
    el("td", { class: "num" }, l.state ? duration(l.state.reset_after_ms) : "–"),
    el("td", { class: "num" }, l.state ? duration(l.state.retry_after_ms) : "–"),
    el("td", { class: l.would_admit ? "ok" : "over" }, l.would_admit ? "admit" : "deny", l.error ? el("div", { class: "error" }, l.error) : null),
    el("td", { class: "key" }, l.key || ""),
  );
}

function renderExplanation(x) {
  const verdict = !x.domain_found
    ? `No policy file declares the domain ${x.domain}: a check is admitted.`
    : x.allowed
      ? "A check now would be admitted."
      : `A check now would be denied by ${x.denied_by.rule} (descriptor ${x.denied_by.descriptor + 1}).`;
  const parts = [el("p", { class: `verdict ${x.allowed ? "admitted" : "denied"}` }, verdict)];
  x.descriptors.forEach((d, i) => {
    const entries = d.entries.map((e) => `${e.key}=${e.value}`).join(" ");
    parts.push(el("h3", {}, `Descriptor ${i + 1} `, el("code", {}, entries)));
    if (d.path.length > 0) {
      parts.push(el("p", { class: "path" }, "path: ", d.path.map((s, j) => [j > 0 ? " → " : "", el("code", {}, s.node), ` (${s.matched_by})`])));
    }
    if (d.override_limit) parts.push(el("p", { class: "note" }, "Envoy's own limit for this descriptor is used instead of the configuration."));
    if (!d.matched) parts.push(el("p", { class: "note" }, `Matches no rule: ${d.unmatched || "nothing configured"}`));
    if (d.limits.length > 0) {
      const head = ["rule", "limit", "mode", "remaining", "resets in", "retry after", "would", "counter key"];
      parts.push(
        el(
          "table",
          {},
          el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
          el("tbody", {}, d.limits.map(limitRow)),
        ),
      );
    }
  });
  return parts;
}

async function explain(event) {
  event.preventDefault();
  const out = $("explain-result");
  try {
    const body = {
      domain: $("explain-domain").value,
      descriptors: descriptors($("explain-entries").value),
      cost: Number($("explain-cost").value || 1),
    };
    if (body.descriptors.length === 0) throw new Error("give at least one descriptor");
    const response = await fetch("/v1/explain", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error ? answer.error.message : `HTTP ${response.status}`);
    out.setAttribute("data-allowed", answer.allowed);
    out.replaceChildren(...renderExplanation(answer));
  } catch (e) {
    out.setAttribute("data-allowed", "");
    out.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

/** The RLQS gauges of the /metrics text: streams open and buckets held. */
function fillRlqsNote(metrics) {
  const gauge = (name) => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})?\\s+(\\S+)`, "m").exec(metrics);
    return m ? Number(m[1]) : 0;
  };
  const streams = gauge("spillway_rlqs_streams");
  const buckets = gauge("spillway_rlqs_buckets");
  const note = $("rlqs-note");
  note.setAttribute("data-streams", streams);
  note.setAttribute("data-buckets", buckets);
  note.textContent = `${plural(streams, "stream")} open, ${plural(buckets, "bucket")} reported (on Redis: this replica's).`;
}

/** /v1/rlqs/explain's answer: the rule, then each holder. */
function renderRlqs(x) {
  const rule =
    x.rule.strategy === "token_bucket"
      ? `${x.rule.requests_per_second} requests/s shared as token buckets; ${x.booked_per_second.toFixed(2)}/s booked now`
      : x.rule.strategy === "deny_all"
        ? "DENY_ALL: the rule blocks every request"
        : x.rule.strategy === "unmatched"
          ? `No rule matches (rlqs_unmatched: ${x.rule.answer})`
          : "ALLOW_ALL: no rule limits this bucket";
  const parts = [el("p", { class: "verdict" }, rule)];
  if (x.holders.length === 0) {
    parts.push(el("p", { class: "note" }, "No Envoy reports this bucket."));
    return parts;
  }
  const num = (v, digits) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
  const head = ["replica", "stream", "open", "demand/s", "share/s", "lapses in"];
  parts.push(
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i > 2 ? "num" : "" }, h)))),
      el(
        "tbody",
        {},
        x.holders.map((h) =>
          el(
            "tr",
            { "data-stream": `${h.replica}:${h.stream}`, "data-share": h.booked_per_second ?? "" },
            el("td", { class: "key" }, h.replica),
            el("td", {}, String(h.stream)),
            el("td", {}, h.open === null ? "another replica's" : h.open ? "open" : "ended"),
            el("td", { class: "num" }, num(h.demand_per_second, 1)),
            el("td", { class: "num" }, num(h.booked_per_second, 2)),
            el("td", { class: "num" }, duration(h.lapses_in_ms)),
          ),
        ),
      ),
    ),
  );
  return parts;
}

async function explainBucket(event) {
  event.preventDefault();
  const out = $("rlqs-result");
  try {
    const bucket = {};
    for (const pair of $("rlqs-bucket").value.trim().split(/\s+/).filter((p) => p.length > 0)) {
      const eq = pair.indexOf("=");
      if (eq <= 0) throw new Error(`"${pair}" is not key=value`);
      bucket[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
    if (Object.keys(bucket).length === 0) throw new Error("give the bucket's pairs");
    const response = await fetch("/v1/rlqs/explain", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ domain: $("rlqs-domain").value, bucket }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error ? answer.error.message : `HTTP ${response.status}`);
    out.setAttribute("data-strategy", answer.rule.strategy);
    out.replaceChildren(...renderRlqs(answer));
  } catch (e) {
    out.setAttribute("data-strategy", "");
    out.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of [$("rules"), $("candidate-rules")]) {
    table.tHead.replaceChildren(el("tr", {}, RULE_COLUMNS.map(([name, cls]) => el("th", { class: cls }, name))));
  }
  $("explain-form").addEventListener("submit", explain);
  $("rlqs-form").addEventListener("submit", explainBucket);
  $("top-domain").addEventListener("change", () => fillTop().catch(() => {}));
  refresh();
  setInterval(refresh, REFRESH_MS);
});
