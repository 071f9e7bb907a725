// snapstore's browsing page: plain JavaScript, no build step, nothing fetched but this server's API.
// Every value shown comes from the repository and is untrusted: it is put in the page with
// textContent only, never as HTML.
"use strict";

const FOLD_CHARS = 1200;   // longer text is folded
const FOLD_LINES = 20;
const PAGE = 200;          // checkpoints per request
const MSG_PAGE = 100;      // messages per request

const state = { runs: [], runsCursor: null, run: null, checkpoints: [], cpCursor: null,
                pickA: null, pickB: null, cp: null, msgOffset: 0, msgTotal: 0 };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function status(text, isError) {
  const s = $("status");
  s.textContent = text || "";
  s.className = isError ? "error" : "";
}

function token() { return sessionStorage.getItem("snapstore-token") || ""; }

async function api(method, path, body) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const err = new Error((data && data.error && data.error.message) || (method + " " + path + ": HTTP " + r.status));
    err.status = r.status;
    err.code = data && data.error && data.error.code;
    throw err;
  }
  return data;
}

const enc = encodeURIComponent;

function fmtBytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB"];
  let u = -1;
  do { n /= 1024; u++; } while (n >= 1024 && u < units.length - 1);
  return n.toFixed(1) + " " + units[u];
}

function tokens(usage) {
  // total tokens of a checkpoint's token usage: its total field, else the sum of its numbers
  if (typeof usage === "number") return usage;
  if (!usage || typeof usage !== "object") return null;
  for (const k of ["total_tokens", "totalTokens", "total"]) if (typeof usage[k] === "number") return usage[k];
  let sum = 0, any = false;
  for (const v of Object.values(usage)) if (typeof v === "number") { sum += v; any = true; }
  return any ? sum : null;
}

function show(section) {
  for (const id of ["welcome", "checkpoint-view", "diff-view"]) $(id).hidden = id !== section;
}

// ---- runs ------------------------------------------------------------------------------------
async function loadRuns(more) {
  try {
    const q = "/runs?limit=500" + (more && state.runsCursor ? "&cursor=" + enc(state.runsCursor) : "");
    const page = await api("GET", q);
    state.runs = more ? state.runs.concat(page.runs) : page.runs;
    state.runsCursor = page.nextCursor;
    renderRuns();
    status(state.runs.length + " run(s)");
  } catch (e) {
    if (e.status === 401) { status("This server needs its token: enter it above.", true); $("token").focus(); }
    else status(e.message, true);
  }
}

function renderRuns() {
  const f = $("run-filter").value.toLowerCase();
  const ul = $("runs");
  ul.replaceChildren();
  for (const r of state.runs) {
    if (f && !r.toLowerCase().includes(f)) continue;
    const a = el("a", { href: "#", class: r === state.run ? "current" : "", "data-run": r,
                        onclick: (ev) => { ev.preventDefault(); openRun(r); } }, r);
    ul.append(el("li", {}, a));
  }
  $("runs-more").hidden = !state.runsCursor;
}

// ---- a run -----------------------------------------------------------------------------------
async function openRun(run) {
  state.run = run; state.checkpoints = []; state.cpCursor = null; state.pickA = state.pickB = null;
  renderRuns();
  $("run-title").textContent = run;
  $("run-view").hidden = false;
  show("welcome"); $("welcome").hidden = true;
  await loadCheckpoints(false);
}

async function loadCheckpoints(more) {
  try {
    let q = "/runs/" + enc(state.run) + "/checkpoints?limit=" + PAGE;
    if (more && state.cpCursor) q += "&cursor=" + enc(state.cpCursor);
    const page = await api("GET", q);
    state.checkpoints = more ? state.checkpoints.concat(page.checkpoints) : page.checkpoints;
    state.cpCursor = page.nextCursor;
    renderCheckpoints();
    renderChart();
    status(state.checkpoints.length + " checkpoint(s) of " + state.run + (state.cpCursor ? " (more below)" : ""));
  } catch (e) {
    status(e.message, true);
    if (e.status === 404) { state.checkpoints = []; renderCheckpoints(); renderChart(); }
  }
}

function renderCheckpoints() {
  const tb = $("checkpoints").querySelector("tbody");
  tb.replaceChildren();
  state.checkpoints.forEach((c, i) => {
    const t = tokens(c.tokenUsage);
    const pick = (which) => el("input", { type: "radio", name: "pick" + which, title: "compare as " + which,
      "data-id": c.id, onchange: () => { state["pick" + which] = c.id; $("diff-button").disabled = !(state.pickA && state.pickB); } });
    const row = el("tr", { class: i === 0 ? "head-row" : "", "data-id": c.id },
      el("td", {}, c.step === null || c.step === undefined ? "" : JSON.stringify(c.step)),
      el("td", {}, c.createdAt.replace("T", " ").replace(/\.\d+Z$/, "")),
      el("td", { class: "num" }, c.messageCount),
      el("td", { class: "num" }, fmtBytes(c.messageBytes)),
      el("td", { class: "num" }, t === null ? "" : t),
      el("td", {}, c.agentId === null ? "" : String(c.agentId)),
      el("td", {}, c.status === null ? "" : String(c.status)),
      el("td", {}, pick("A")), el("td", {}, pick("B")),
      el("td", {},
        el("button", { type: "button", class: "open", onclick: () => openCheckpoint(c) }, "Open"),
        i === 0 ? null : el("button", { type: "button", class: "rollback", onclick: () => rollback(c) }, "Roll back here"),
        el("button", { type: "button", class: "fork", onclick: () => fork(c) }, "Fork")));
    tb.append(row);
  });
  $("checkpoints-more").hidden = !state.cpCursor;
}

function renderChart() {
  // steps, tokens and message bytes of the loaded checkpoints over time, each scaled to its own maximum
  const svg = $("chart");
  const NS = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const cps = state.checkpoints.slice().reverse();
  const legend = $("chart-legend");
  legend.replaceChildren();
  if (!cps.length) return;
  const times = cps.map((c) => Date.parse(c.createdAt));
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const series = [
    ["steps", "#1f5fbf", cps.map((c) => (typeof c.step === "number" ? c.step : null))],
    ["tokens", "#c05621", cps.map((c) => tokens(c.tokenUsage))],
    ["bytes", "#2e7d32", cps.map((c) => c.messageBytes)],
  ];
  const W = 800, H = 220, P = 10;
  const x = (i) => (t1 > t0 ? P + (W - 2 * P) * (times[i] - t0) / (t1 - t0) : (cps.length > 1 ? P + (W - 2 * P) * i / (cps.length - 1) : W / 2));
  for (const [name, color, vals] of series) {
    const nums = vals.filter((v) => v !== null);
    if (!nums.length) continue;
    const max = Math.max(...nums) || 1;
    const pts = [];
    vals.forEach((v, i) => { if (v !== null) pts.push(x(i).toFixed(1) + "," + (H - P - (H - 2 * P) * v / max).toFixed(1)); });
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    line.setAttribute("class", "series-" + name);
    svg.append(line);
    legend.append(el("span", {}, el("span", { class: "swatch" }), name + " (max " + (name === "bytes" ? fmtBytes(max) : max) + ")"));
    legend.lastChild.firstChild.style.background = color;
  }
  legend.append(el("span", { class: "meta" }, cps.length + " checkpoints, " +
    new Date(t0).toISOString().slice(0, 19).replace("T", " ") + " to " + new Date(t1).toISOString().slice(0, 19).replace("T", " ") + " UTC"));
}

// ---- a checkpoint's messages -----------------------------------------------------------------
async function openCheckpoint(c) {
  state.cp = c; state.msgOffset = 0;
  $("checkpoint-title").textContent = c.id;
  $("checkpoint-meta").textContent = "step " + JSON.stringify(c.step) + " \u00b7 " + c.messageCount + " messages \u00b7 " +
    fmtBytes(c.messageBytes) + " \u00b7 created " + c.createdAt + (c.parentId ? " \u00b7 parent " + c.parentId : "") +
    (c.metadata !== null ? " \u00b7 metadata " + JSON.stringify(c.metadata) : "");
  $("messages").replaceChildren();
  $("session-state").replaceChildren();
  show("checkpoint-view");
  await loadMessages();
  $("checkpoint-view").scrollIntoView();
}

async function loadMessages() {
  const c = state.cp;
  try {
    const q = "/runs/" + enc(state.run) + "/checkpoints/" + enc(c.id) + "/messages?offset=" + state.msgOffset + "&limit=" + MSG_PAGE;
    const page = await api("GET", q);
    if (state.msgOffset === 0 && page.sessionState !== null) {
      $("session-state").replaceChildren(fold("session state", JSON.stringify(page.sessionState, null, 2), true));
    }
    const ol = $("messages");
    ol.start = 1;
    page.messages.forEach((m) => ol.append(renderMessage(m)));
    state.msgOffset += page.messages.length;
    state.msgTotal = page.total;
    $("messages-more").hidden = state.msgOffset >= page.total;
    status("showing " + state.msgOffset + " of " + page.total + " messages");
  } catch (e) { status(e.message, true); }
}

function fold(label, text, always) {
  const lines = text.split("\n").length;
  if (!always && text.length <= FOLD_CHARS && lines <= FOLD_LINES) return el("pre", {}, text);
  const first = text.slice(0, 160).split("\n")[0];
  return el("details", { class: "folded" },
    el("summary", {}, (label ? label + ": " : "") + first + (first.length < text.length ? " \u2026 (" + text.length + " chars, " + lines + " lines)" : "")),
    el("pre", {}, text));
}

function textOf(v) { return typeof v === "string" ? v : JSON.stringify(v, null, 2); }

function renderToolCall(name, args, id) {
  let a = args;
  if (typeof a === "string") { try { a = JSON.parse(a); } catch (e) { /* keep the text */ } }
  return el("div", { class: "tool-call" }, el("span", { class: "name" }, "\u2192 " + (name || "tool call")),
    id ? el("span", { class: "meta" }, " " + id) : null, fold("", textOf(a)));
}

function renderBlock(b, role) {
  // one block of a content list (Anthropic / OpenAI shapes), else its JSON
  if (b && typeof b === "object") {
    if (b.type === "text" && typeof b.text === "string") return fold("", b.text);
    if (b.type === "thinking") return fold("thinking", textOf(b.thinking), true);
    if (b.type === "tool_use") return renderToolCall(b.name, b.input, b.id);
    if (b.type === "tool_result") return el("div", { class: "tool-result" }, el("span", { class: "meta" }, "result of " + (b.tool_use_id || "")),
      fold("output", Array.isArray(b.content) ? b.content.map((x) => (x && x.text) || textOf(x)).join("\n") : textOf(b.content), false));
  }
  return fold("", textOf(b));
}

function renderMessage(m) {
  const li = el("li", { class: "msg" });
  if (!m || typeof m !== "object" || Array.isArray(m)) { li.append(fold("", textOf(m))); return li; }
  const role = typeof m.role === "string" ? m.role : "message";
  li.classList.add("role-" + role.replace(/[^a-z]/gi, ""));
  li.append(el("span", { class: "role role-" + role.replace(/[^a-z]/gi, "") }, role));
  if (m.name) li.append(el("span", { class: "meta" }, " " + m.name));
  if (m.tool_call_id) li.append(el("span", { class: "meta" }, " result of " + m.tool_call_id));
  const c = m.content;
  if (typeof c === "string") li.append(role === "tool" ? fold("output", c, c.length > 400) : fold("", c));
  else if (Array.isArray(c)) c.forEach((b) => li.append(renderBlock(b, role)));
  else if (c !== undefined && c !== null) li.append(fold("", textOf(c)));
  if (Array.isArray(m.tool_calls)) {
    for (const tc of m.tool_calls) {
      const f = (tc && tc.function) || tc || {};
      li.append(renderToolCall(f.name, f.arguments, tc && tc.id));
    }
  }
  const extra = {};
  for (const [k, v] of Object.entries(m)) if (!["role", "content", "tool_calls", "tool_call_id", "name"].includes(k)) extra[k] = v;
  if (Object.keys(extra).length) li.append(fold("other fields", JSON.stringify(extra, null, 2), true));
  return li;
}

// ---- diff, rollback, fork --------------------------------------------------------------------
async function showDiff() {
  const a = state.pickA, b = state.pickB;
  try {
    const d = await api("GET", "/runs/" + enc(state.run) + "/diff?from=" + enc(a) + "&to=" + enc(b));
    $("diff-title").textContent = a + " \u2192 " + b;
    const box = $("diff");
    box.replaceChildren();
    for (const op of d.ops) {
      const div = el("div", { class: "diff-op " + op.op });
      if (op.op === "equal") div.append(el("p", {}, "messages " + (op.fromStart + 1) + "\u2013" + op.fromEnd + " unchanged" +
        (op.fromStart !== op.toStart ? " (at " + (op.toStart + 1) + "\u2013" + op.toEnd + " in B)" : "")));
      else {
        const range = (a, b) => (a + 1) + "\u2013" + b;
        const what = op.op === "insert" ? "added in B: messages " + range(op.toStart, op.toEnd)
          : op.op === "delete" ? "only in A: messages " + range(op.fromStart, op.fromEnd)
          : "changed: A " + range(op.fromStart, op.fromEnd) + " became B " + range(op.toStart, op.toEnd);
        div.append(el("p", {}, what));
        const from = el("ol", { class: "from" }), to = el("ol", { class: "to" });
        from.start = op.fromStart + 1;
        to.start = op.toStart + 1;
        (op.fromMessages || []).forEach((m) => from.append(renderMessage(m)));
        (op.toMessages || []).forEach((m) => to.append(renderMessage(m)));
        div.append(from, to);
      }
      box.append(div);
    }
    show("diff-view");
    $("diff-view").scrollIntoView();
    status(d.ops.filter((o) => o.op !== "equal").length + " change(s)");
  } catch (e) { status(e.message, true); }
}

async function rollback(c) {
  const head = state.checkpoints[0];
  if (!window.confirm("Roll run " + state.run + " back to checkpoint " + c.id + "? Later checkpoints are deleted.")) return;
  try {
    await api("POST", "/runs/" + enc(state.run) + "/checkpoints/" + enc(c.id) + "/rollback?expectHead=" + enc(head.id));
    // what was shown below the table may be gone now: show the run as it is
    show(null);
    state.pickA = state.pickB = null;
    $("diff-button").disabled = true;
    await loadCheckpoints(false);
    $("run-view").scrollIntoView();
    status("rolled back to " + c.id + "; " + state.checkpoints.length + " checkpoint(s) left");
  } catch (e) {
    status(e.code === "head_mismatch" ? "The run changed meanwhile; reloaded it, try again. (" + e.message + ")" : e.message, true);
    if (e.code === "head_mismatch") await loadCheckpoints(false);
  }
}

async function fork(c) {
  const name = window.prompt("New run id for the fork of " + c.id + ":", state.run + "-fork");
  if (!name) return;
  try {
    await api("POST", "/runs/" + enc(state.run) + "/checkpoints/" + enc(c.id) + "/fork", { newRunId: name });
    await loadRuns(false);
    await openRun(name);
    status("forked into " + name);
  } catch (e) { status(e.message, true); }
}

// ---- start -----------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("token").value = token();
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("snapstore-token", $("token").value.trim());
    loadRuns(false);
  });
  $("run-filter").addEventListener("input", renderRuns);
  $("runs-more").addEventListener("click", () => loadRuns(true));
  $("checkpoints-more").addEventListener("click", () => loadCheckpoints(true));
  $("messages-more").addEventListener("click", loadMessages);
  $("diff-button").addEventListener("click", showDiff);
  loadRuns(false);
});
