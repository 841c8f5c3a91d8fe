// turnstile console. Talks only to the service's HTTP API (docs/console.md):
// the key lives in sessionStorage (this tab) and travels only in Authorization headers.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const WINDOW_S = 300; // charts and fairness cover the last 5 minutes
  const STORE = "turnstile.console";

  const session = { key: null, workspace: null, admin: false };
  let feedAbort = null;
  let lanes = [];
  let lastAt = 0; // server clock of the last update
  let clockSkew = 0; // server - local, ms
  const seconds = new Map(); // epoch second -> {admitted, refused: {reason: n}}
  const pauses = []; // pauses seen by this session
  const liveTransitions = [];
  let current = null; // current profile revision
  let limitsRevision = null; // the revision the principals' limits table shows

  // ---- API ----------------------------------------------------------------------------
  async function api(method, path, body) {
    const headers = { Authorization: "Bearer " + session.key };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    const text = await res.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
    if (!res.ok) {
      const err = new Error((json && json.message) || res.statusText || "request failed");
      err.status = res.status;
      err.code = json && json.error;
      throw err;
    }
    return json;
  }
  const wsPath = (suffix) => `/v1/workspaces/${encodeURIComponent(session.workspace)}${suffix}`;

  function status(text, ok) {
    const s = $("status");
    s.textContent = text || "";
    s.classList.toggle("ok", !!ok);
  }

  // ---- sign-in ------------------------------------------------------------------------
  // The workspaces a typed key may see (`GET /v1/workspaces`), suggested by the workspace
  // field (its datalist, and buttons that fill it). A refused key suggests nothing: signing in
  // says why.
  async function suggestWorkspaces(key) {
    const options = $("workspace-options");
    const shown = $("workspace-suggestions");
    options.replaceChildren();
    shown.replaceChildren();
    shown.hidden = true;
    if (!key) return;
    let listed;
    try {
      const res = await fetch("/v1/workspaces", { headers: { Authorization: "Bearer " + key }, cache: "no-store" });
      if (!res.ok) return;
      listed = (await res.json()).workspaces || [];
    } catch (_) { return; }
    if ($("key").value.trim() !== key || !listed.length) return;
    shown.append(listed.length === 1 ? "Your workspace: " : "Workspaces this key may see: ");
    for (const w of listed) {
      const option = document.createElement("option");
      option.value = w.workspaceId;
      option.label = w.profileVersion ? `profile ${w.profileVersion}` : "no profile yet";
      options.appendChild(option);
      const pick = document.createElement("button");
      pick.type = "button";
      pick.className = "secondary";
      pick.dataset.workspace = w.workspaceId;
      pick.textContent = w.workspaceId;
      pick.addEventListener("click", () => { $("workspace").value = w.workspaceId; $("workspace").focus(); });
      shown.appendChild(pick);
    }
    shown.hidden = false;
  }

  async function signIn(key, workspace) {
    session.key = key;
    session.workspace = workspace;
    try {
      await api("GET", wsPath("/snapshot"));
    } catch (e) {
      session.key = null;
      if (e.status === 401) throw new Error("This key was refused (unknown or revoked).");
      if (e.status === 403) throw new Error("This key may not read workspace " + workspace + ".");
      if (e.status === 404) throw new Error("Workspace " + workspace + " has no profile yet.");
      throw e;
    }
    try {
      await api("GET", wsPath("/keys"));
      session.admin = true;
    } catch (e) {
      if (e.status !== 403) throw e;
      session.admin = false;
    }
    sessionStorage.setItem(STORE, JSON.stringify({ key, workspace }));
    $("signin-view").hidden = true;
    $("app").hidden = false;
    $("session").hidden = false;
    $("who").textContent = `${session.admin ? "admin" : "principal"} · ${workspace}`;
    document.querySelectorAll("[data-admin]").forEach((n) => { n.hidden = !session.admin; });
    document.body.dataset.role = session.admin ? "admin" : "principal";
    status("");
    limitsRevision = null;
    select("lanes");
    startFeed();
  }

  function signOut(message) {
    if (feedAbort) feedAbort.abort();
    feedAbort = null;
    sessionStorage.removeItem(STORE);
    session.key = null;
    $("key").value = "";
    $("app").hidden = true;
    $("session").hidden = true;
    $("signin-view").hidden = false;
    status(message || "");
  }

  // ---- tabs ---------------------------------------------------------------------------
  const VIEWS = ["lanes", "fairness", "profiles", "breakers", "keys"];
  function select(name) {
    for (const v of VIEWS) {
      const on = v === name;
      $("tab-" + v).setAttribute("aria-selected", String(on));
      $("tab-" + v).tabIndex = on ? 0 : -1;
      $("view-" + v).hidden = !on;
    }
    document.body.dataset.view = name;
    if (name === "profiles") loadProfiles().catch(fail);
    if (name === "breakers") loadBreakers().catch(fail);
    if (name === "keys") loadKeys().catch(fail);
    if (name === "fairness") loadFairness().catch(fail);
    if (name === "lanes" && session.admin) loadPrincipalLimits().catch(fail);
  }

  function fail(e) {
    if (e && e.status === 401) { signOut("Signed out: the key was refused (revoked?)."); return; }
    status((e && e.message) || String(e));
  }

  // ---- live feed (server-sent events over fetch, so the key stays in a header) ---------
  async function startFeed() {
    if (feedAbort) feedAbort.abort();
    const abort = new AbortController();
    feedAbort = abort;
    const badge = $("live");
    let retry = 500;
    while (!abort.signal.aborted) {
      try {
        const res = await fetch(wsPath("/events"), { headers: { Authorization: "Bearer " + session.key }, signal: abort.signal, cache: "no-store" });
        if (res.status === 401) { signOut("Signed out: the key was refused (revoked?)."); return; }
        if (!res.ok) throw new Error("feed answered " + res.status);
        badge.textContent = "live";
        badge.className = "badge live";
        retry = 500;
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            onFrame(frame);
          }
        }
      } catch (e) {
        if (abort.signal.aborted) return;
      }
      badge.textContent = "reconnecting…";
      badge.className = "badge down";
      await new Promise((r) => setTimeout(r, retry));
      retry = Math.min(retry * 2, 5000);
    }
  }

  function onFrame(frame) {
    let event = "message", data = "";
    for (const line of frame.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (event !== "update") return;
    const update = JSON.parse(data);
    lastAt = update.atEpochMs;
    clockSkew = update.atEpochMs - Date.now();
    lanes = update.lanes || [];
    const sec = Math.floor(update.atEpochMs / 1000);
    const bucket = secondBucket(sec);
    for (const d of update.decisions || []) {
      if (d.reason === "admitted") bucket.admitted += d.count;
      else bucket.refused[d.reason] = (bucket.refused[d.reason] || 0) + d.count;
    }
    for (const p of update.pauses || []) pauses.push(p);
    for (const t of update.transitions || []) liveTransitions.push(t);
    if (pauses.length > 200) pauses.splice(0, pauses.length - 200);
    if (liveTransitions.length > 200) liveTransitions.splice(0, liveTransitions.length - 200);
    if (((update.transitions || []).length || (update.pauses || []).length) && document.body.dataset.view === "breakers") loadBreakers().catch(fail);
    if (update.profileChange && document.body.dataset.view === "profiles") loadProfiles().catch(fail);
    if (update.profileChange && session.admin) loadPrincipalLimits().catch(fail);
    renderLanes();
    renderCharts();
    if (document.body.dataset.view === "fairness" && Date.now() - fairnessAt >= 1000) loadFairness().catch(fail);
    document.body.dataset.updatedAt = String(update.atEpochMs);
  }

  function secondBucket(sec) {
    let b = seconds.get(sec);
    if (!b) {
      b = { admitted: 0, refused: {} };
      seconds.set(sec, b);
      for (const k of seconds.keys()) if (k < sec - WINDOW_S) seconds.delete(k);
    }
    return b;
  }

  const ms = (v) => (v == null ? "–" : v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(1)} s`);
  const remaining = (until) => (until == null ? null : Math.max(0, until - (Date.now() + clockSkew)));

  function cell(row, text, field, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (field) td.dataset.field = field;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  // Each cell is labelled with its column's heading (phone layout: one card per row).
  function labelCells(table) {
    const heads = [...table.tHead.rows[0].cells].map((c) => c.textContent);
    for (const row of table.tBodies[0].rows) {
      [...row.cells].forEach((c, i) => { if (c.tagName === "TD" && heads[i]) c.dataset.label = heads[i]; });
    }
  }

  function meter(td, value, max) {
    const m = document.createElement("span");
    m.className = "meter";
    const fill = document.createElement("span");
    fill.style.width = `${max > 0 ? Math.min(100, (100 * value) / max) : 0}%`;
    m.appendChild(fill);
    td.appendChild(m);
  }

  function renderLanes() {
    const body = $("lanes").tBodies[0];
    const rows = [];
    let active = 0, queued = 0;
    for (const l of lanes) {
      active += l.active; queued += l.queued;
      const tr = document.createElement("tr");
      tr.dataset.provider = l.providerId;
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = l.providerId;
      tr.appendChild(th);
      const a = cell(tr, `${l.active} / ${l.concurrency == null ? "–" : l.concurrency}`, "active", "num");
      a.dataset.value = String(l.active);
      meter(a, l.active, l.concurrency || 0);
      const q = cell(tr, String(l.queued), "queued", "num");
      q.dataset.value = String(l.queued);
      cell(tr, ms(l.oldestWaitMs), "oldest-wait", "num");
      for (const [name, b] of [["requests", l.requests], ["tokens", l.tokens]]) {
        const td = cell(tr, b ? `${b.available} / ${b.capacity}` : "unlimited", name, "num");
        if (b) meter(td, b.available, b.capacity);
      }
      const br = cell(tr, "", "breaker");
      br.dataset.value = l.breakerState;
      const state = document.createElement("span");
      state.className = "state-" + l.breakerState;
      state.textContent = l.breakerState;
      br.appendChild(state);
      const probe = remaining(l.nextProbeAt);
      if (probe != null) br.appendChild(document.createTextNode(` · probe in ${ms(probe)}`));
      const pause = remaining(l.pausedUntil);
      cell(tr, pause ? `${ms(pause)} left` : "–", "pause", "num");
      const held = cell(tr, "", "binding");
      const bindings = l.bindings || [];
      held.dataset.value = bindings.map((b) => b.binding).join(" ");
      for (const b of bindings) {
        const tag = document.createElement("span");
        tag.className = "binding";
        tag.dataset.binding = b.binding;
        tag.textContent = `${BINDINGS[b.binding] || b.binding}${b.lanes > 1 ? ` ×${b.lanes}` : ""}`;
        tag.title = `${b.lanes} queued lane${b.lanes === 1 ? "" : "s"} (one per principal)`;
        held.appendChild(tag);
      }
      if (!bindings.length) held.textContent = l.queued ? "…" : "–";
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    labelCells($("lanes"));
    const totals = $("totals");
    totals.replaceChildren();
    for (const [label, value, field] of [["active", active, "total-active"], ["queued", queued, "total-queued"], ["updated", new Date(lastAt).toLocaleTimeString(), "updated"]]) {
      const span = document.createElement("span");
      span.append(label + ": ");
      const strong = document.createElement("strong");
      strong.textContent = String(value);
      strong.dataset.field = field;
      span.appendChild(strong);
      totals.appendChild(span);
    }
  }

  // Which limit holds a queued lane (`LaneView.bindings`, docs/console.md), in words.
  const BINDINGS = {
    "principal-concurrency": "principal concurrency",
    "workspace-concurrency": "workspace concurrency",
    "provider-concurrency": "provider concurrency",
    "workspace-share": "principal's share of the workspace",
    "provider-share": "principal's share of the provider",
    "workspace-reservation": "workspace permits reserved for others",
    "provider-reservation": "provider permits reserved for others",
    "principal-requests": "principal requests / min",
    "workspace-requests": "workspace requests / min",
    "provider-requests": "provider requests / min",
    "principal-tokens": "principal tokens / s",
    "workspace-tokens": "workspace tokens / s",
    "provider-tokens": "provider tokens / s",
    "provider-pause": "provider pause (Retry-After)",
    "provider-breaker": "provider breaker open",
    "provider-quota-requests": "provider's request quota",
    "provider-quota-tokens": "provider's token quota",
  };

  // The principals' limits in the profile in force (admin: `GET …/profiles`, then the current
  // revision's limits), read again when the feed announces a profile change.
  async function loadPrincipalLimits() {
    const { records } = await api("GET", wsPath("/profiles"));
    const latest = records.length ? records[records.length - 1].profileVersion : null;
    if (!latest || latest === limitsRevision) return;
    const revision = await api("GET", wsPath(`/profiles/${encodeURIComponent(latest)}`));
    limitsRevision = latest;
    $("limits-revision").textContent = latest;
    const principals = Object.entries(revision.profile.principals || {}).sort(([a], [b]) => a.localeCompare(b));
    const num = (v) => (v == null ? "–" : Number(v).toLocaleString("en-US"));
    $("principal-limits").tBodies[0].replaceChildren(...principals.map(([id, l]) => {
      const tr = document.createElement("tr");
      tr.dataset.principal = id;
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = id;
      tr.appendChild(th);
      cell(tr, num(l.concurrency), "concurrency", "num");
      cell(tr, l.requestsPerMinute == null ? "unlimited" : num(l.requestsPerMinute), "requests", "num");
      cell(tr, l.tokensPerSecond == null ? "unlimited" : num(l.tokensPerSecond), "tokens", "num");
      cell(tr, `${num(l.maxQueueLength)} · ${l.maxQueueWaitMs == null ? "–" : ms(l.maxQueueWaitMs)}`, "queue", "num");
      const budget = [l.maxCostUsd == null ? null : `$${l.maxCostUsd}`, l.maxTokens == null ? null : `${num(l.maxTokens)} tokens`, l.maxAttempts == null ? null : `${l.maxAttempts} attempts`].filter(Boolean);
      cell(tr, budget.join(" · ") || "–", "budget");
      cell(tr, `${l.priority || "standard"} · ${l.weight == null ? 1 : l.weight}`, "band");
      return tr;
    }));
    labelCells($("principal-limits"));
    $("principal-limits-card").hidden = false;
  }

  function windowSeconds() {
    const now = Math.floor(lastAt / 1000);
    const out = [];
    for (let s = now - WINDOW_S + 1; s <= now; s++) out.push(seconds.get(s));
    return out;
  }

  function renderCharts() {
    const C = window.TurnstileCharts;
    const win = windowSeconds();
    C.lines($("chart-admissions"), [{ name: "admitted", values: win.map((b) => (b ? b.admitted : 0)) }], { xLabel: "now" });
    const reasons = new Set();
    for (const b of win) if (b) Object.keys(b.refused).forEach((r) => reasons.add(r));
    const list = [...reasons].sort();
    const series = list.map((r, i) => ({ name: r, color: C.palette[(i + 1) % C.palette.length], values: win.map((b) => (b && b.refused[r]) || 0) }));
    C.lines($("chart-refusals"), series.length ? series : [{ name: "none", values: win.map(() => 0) }], { xLabel: "now" });
    const legend = $("refusal-legend");
    legend.replaceChildren(...series.map((s) => {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = s.color;
      li.append(sw, `${s.name}: ${s.values.reduce((a, b) => a + b, 0)}`);
      return li;
    }));
  }

  // The server keeps the window (GET …/fairness: per-minute buckets); the tab only draws it.
  let fairnessAt = 0;
  const percent = (ratio) => `${(100 * ratio).toFixed(1)} %`;
  async function loadFairness() {
    fairnessAt = Date.now();
    const view = await api("GET", wsPath("/fairness"));
    const all = view.totalGrants;
    const body = $("fairness").tBodies[0];
    body.replaceChildren(...view.principals.map((p) => {
      const tr = document.createElement("tr");
      tr.dataset.principal = p.principalId;
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = p.principalId;
      tr.appendChild(th);
      // Band and weight from the profile in force ("—": the profile no longer names it).
      cell(tr, p.priority ?? "—", "priority");
      cell(tr, p.weight === null ? "—" : String(p.weight), "weight", "num");
      cell(tr, String(p.grants), "grants", "num");
      cell(tr, percent(p.share), "share", "num");
      cell(tr, p.tokens.toLocaleString("en-US"), "tokens", "num").dataset.value = String(p.tokens);
      cell(tr, percent(p.tokenShare), "token-share", "num");
      cell(tr, ms(Math.round(p.meanQueueDelayMs)), "mean-delay", "num");
      return tr;
    }));
    if (!view.principals.length) {
      const tr = document.createElement("tr");
      const td = cell(tr, "No grants in the last 5 minutes.");
      td.colSpan = 8;
      body.appendChild(tr);
    }
    labelCells($("fairness"));
    const from = new Date(view.fromEpochMs).toLocaleTimeString();
    const extra = view.unattributedGrants ? `, ${view.unattributedGrants} not attributed` : "";
    const tokens = `${view.totalTokens.toLocaleString("en-US")} token${view.totalTokens === 1 ? "" : "s"}`;
    $("fairness-summary").textContent = `${all} grant${all === 1 ? "" : "s"} and ${tokens} since ${from}, mean queue delay ${ms(Math.round(view.meanQueueDelayMs))}${extra}.`;
    const modes = (mode) => view.providers.filter((p) => p.fairness === mode).map((p) => p.providerId).join(", ") || "none";
    $("fairness-modes").textContent = `Lanes fair in tokens: ${modes("tokens")}; in requests: ${modes("requests")}.`;
    $("fairness").dataset.total = String(all);
    $("fairness").dataset.totalTokens = String(view.totalTokens);
    window.TurnstileCharts.bars($("chart-fairness"), view.principals.map((p) => ({ label: p.principalId, value: p.grants, text: percent(p.share) })));
    window.TurnstileCharts.bars($("chart-fairness-tokens"), view.principals.map((p) => ({ label: p.principalId, value: p.tokens, text: percent(p.tokenShare) })));
    window.TurnstileCharts.bars($("chart-fairness-minutes"), view.minutes.map((m) => ({ label: new Date(m.startEpochMs).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }), value: m.grants, text: String(m.grants) })));
  }

  // ---- profiles -----------------------------------------------------------------------
  async function loadProfiles() {
    const { records } = await api("GET", wsPath("/profiles"));
    const body = $("history").tBodies[0];
    const newest = [...records].reverse();
    current = newest.length ? newest[0].profileVersion : null;
    $("current-revision").textContent = current || "–";
    $("current-digest").textContent = newest.length ? newest[0].digest : "";
    const versions = [];
    body.replaceChildren(...newest.map((r) => {
      if (!versions.includes(r.profileVersion)) versions.push(r.profileVersion);
      const tr = document.createElement("tr");
      tr.dataset.revision = r.profileVersion;
      cell(tr, new Date(r.atEpochMs).toLocaleString());
      cell(tr, r.kind, "kind");
      cell(tr, r.profileVersion, "revision");
      cell(tr, r.previousProfileVersion || "–");
      // The admin key that made the change (null: the first start, or an older record).
      const by = cell(tr, r.actorKeyId || "–", "actor", "digest");
      if (!r.actorKeyId) by.title = "no key: registered at first start, or before the audit log kept actors";
      // The approval on record (null: none given, or an older record).
      cell(tr, r.approvedBy || "–", "approved-by");
      cell(tr, r.note || "–", "note", "note");
      cell(tr, r.digest.slice(0, 19) + "…", "digest", "digest");
      const td = cell(tr, "");
      td.hidden = !session.admin;
      if (session.admin && r.profileVersion !== current) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "secondary";
        b.textContent = "Roll back to " + r.profileVersion;
        b.dataset.rollback = r.profileVersion;
        b.addEventListener("click", () => rollback(r.profileVersion));
        td.appendChild(b);
      }
      return tr;
    }));
    labelCells($("history"));
    // the rollback button appears once per revision (its newest row)
    const seen = new Set();
    body.querySelectorAll("button[data-rollback]").forEach((b) => {
      if (seen.has(b.dataset.rollback)) b.remove(); else seen.add(b.dataset.rollback);
    });
    for (const [id, pick] of [["diff-a", 1], ["diff-b", 0]]) {
      const sel = $(id);
      const old = sel.value;
      sel.replaceChildren(...versions.map((v) => new Option(v, v)));
      sel.value = versions.includes(old) ? old : versions[Math.min(pick, versions.length - 1)] || "";
    }
    await rollout.load(current);
  }

  function flatten(value, prefix, out) {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      const keys = Object.keys(value).sort();
      if (!keys.length && prefix) out.set(prefix, "{}");
      for (const k of keys) flatten(value[k], prefix ? `${prefix}.${k}` : k, out);
    } else {
      out.set(prefix, JSON.stringify(value));
    }
    return out;
  }

  async function showDiff(a, b) {
    const [ra, rb] = await Promise.all([a, b].map((v) => api("GET", wsPath("/profiles/" + encodeURIComponent(v)))));
    renderDiff($("diff"), { label: a, digest: ra.digest, profile: ra.profile }, { label: b, digest: rb.digest, profile: rb.profile });
  }

  // The limits of two profiles, flattened to dotted paths, line by line into `pre`.
  function renderDiff(pre, a, b) {
    const fa = flatten(a.profile, "", new Map()), fb = flatten(b.profile, "", new Map());
    const keys = [...new Set([...fa.keys(), ...fb.keys()])].sort();
    const lines = [];
    const line = (cls, text) => { const s = document.createElement("span"); s.className = cls; s.textContent = text + "\n"; lines.push(s); };
    line("", `--- ${a.label}  ${a.digest}\n+++ ${b.label}  ${b.digest}`);
    let changes = 0;
    for (const k of keys) {
      const va = fa.get(k), vb = fb.get(k);
      if (va === vb) continue;
      changes++;
      if (va === undefined) line("add", `+ ${k}: ${vb}`);
      else if (vb === undefined) line("del", `- ${k}: ${va}`);
      else line("chg", `~ ${k}: ${va} → ${vb}`);
    }
    if (!changes) line("", "(no difference in limits)");
    pre.replaceChildren(...lines);
  }

  function confirmDialog(text) {
    return new Promise((resolve) => {
      const d = $("confirm");
      $("confirm-text").textContent = text;
      $("confirm-approval").hidden = true;
      d.returnValue = "";
      d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
      d.showModal();
      $("confirm-cancel").focus();
    });
  }

  // A revision change (rollback, rollout start, promote, abort) asks for its approval on
  // record: resolves with `{note?, approvedBy?}` (only what was filled in), or null on cancel.
  function approvalDialog(text) {
    return new Promise((resolve) => {
      const d = $("confirm");
      $("confirm-text").textContent = text;
      $("confirm-approval").hidden = false;
      $("confirm-note").value = "";
      $("confirm-approved-by").value = "";
      d.returnValue = "";
      d.addEventListener("close", () => {
        if (d.returnValue !== "ok") return resolve(null);
        const approval = {};
        const note = $("confirm-note").value.trim(), by = $("confirm-approved-by").value.trim();
        if (note) approval.note = note;
        if (by) approval.approvedBy = by;
        resolve(approval);
      }, { once: true });
      d.showModal();
      $("confirm-approved-by").focus();
    });
  }

  async function rollback(version) {
    const approval = await approvalDialog(`Roll workspace ${session.workspace} back to revision ${version}? New admissions use its limits at once; the change is recorded in the audit log.`);
    if (!approval) return;
    try {
      const rev = await api("GET", wsPath("/profiles/" + encodeURIComponent(version)));
      const record = await api("PUT", wsPath("/profiles/" + encodeURIComponent(version)), { ...rev.profile, ...approval });
      status(`Rolled back to ${version} (${record && record.kind ? record.kind : "unchanged"}).`, true);
      await loadProfiles();
    } catch (e) { fail(e); }
  }

  // ---- breakers & pauses --------------------------------------------------------------
  function transitionReason(t) {
    if (t.to === "open" && t.from === "half-open") return "a probe failed: open again";
    if (t.to === "open") return `opened after ${t.failures} consecutive failure${t.failures === 1 ? "" : "s"}`;
    if (t.to === "half-open") return "open period elapsed: letting probes through";
    if (t.to === "closed") return "a probe succeeded: closed";
    return "";
  }

  const PAUSE_CAUSE = {
    "retry-after-call": "a principal relayed the provider's Retry-After",
    "release-outcome": "a call ended with Retry-After",
  };

  async function loadBreakers() {
    const [{ records }, { records: pauseRecords }] = await Promise.all([
      api("GET", wsPath("/breakers")),
      api("GET", wsPath("/pauses")),
    ]);
    const rows = [];
    const seen = new Set();
    for (const t of [...records, ...liveTransitions]) {
      const key = `${t.providerId}|${t.atEpochMs}|${t.from}|${t.to}`;
      if (seen.has(key)) continue;
      seen.add(key);
      rows.push({ at: t.atEpochMs, provider: t.providerId, change: `${t.from} → ${t.to}`, reason: transitionReason(t), kind: "breaker", to: t.to });
    }
    // Pauses are journaled (GET …/pauses); the feed adds those newer than the last read.
    for (const p of [...pauseRecords, ...pauses]) {
      const key = `pause|${p.providerId}|${p.atEpochMs}|${p.untilEpochMs}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const cause = PAUSE_CAUSE[p.cause] || p.cause;
      rows.push({ at: p.atEpochMs, provider: p.providerId, change: "paused", reason: `Retry-After ${ms(p.retryAfterMs)}: ${cause} (until ${new Date(p.untilEpochMs).toLocaleTimeString()})`, kind: "pause" });
    }
    rows.sort((a, b) => b.at - a.at);
    const body = $("transitions").tBodies[0];
    body.replaceChildren(...rows.map((r) => {
      const tr = document.createElement("tr");
      tr.dataset.kind = r.kind;
      tr.dataset.provider = r.provider;
      if (r.to) tr.dataset.to = r.to;
      cell(tr, new Date(r.at).toLocaleString());
      cell(tr, r.provider);
      cell(tr, r.change, "change");
      cell(tr, r.reason, "reason");
      return tr;
    }));
    labelCells($("transitions"));
    if (!rows.length) {
      const tr = document.createElement("tr");
      cell(tr, "No transitions or pauses recorded.").colSpan = 4;
      body.appendChild(tr);
    }
  }

  // ---- keys ---------------------------------------------------------------------------
  async function loadKeys() {
    const listing = await api("GET", wsPath("/keys"));
    const body = $("keys").tBodies[0];
    body.replaceChildren(...listing.keys.map((k) => {
      const tr = document.createElement("tr");
      tr.dataset.keyId = k.keyId;
      cell(tr, k.keyId, "key-id");
      cell(tr, k.principalId, "principal");
      cell(tr, new Date(k.createdAtEpochMs).toLocaleString());
      const td = cell(tr, "");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "danger";
      b.textContent = "Revoke";
      b.setAttribute("aria-label", `Revoke key ${k.keyId} of ${k.principalId}`);
      b.dataset.revoke = k.keyId;
      b.addEventListener("click", () => revoke(k));
      td.appendChild(b);
      return tr;
    }));
    labelCells($("keys"));
    $("revocations").replaceChildren(...listing.revocations.map((r) => {
      const li = document.createElement("li");
      li.textContent = `${r.keyId} revoked ${new Date(r.revokedAtEpochMs).toLocaleString()}`;
      return li;
    }));
  }

  async function revoke(k) {
    if (!(await confirmDialog(`Revoke key ${k.keyId} of ${k.principalId}? It stops authenticating at once.`))) return;
    try {
      await api("DELETE", wsPath("/keys/" + encodeURIComponent(k.keyId)));
      status(`Revoked ${k.keyId}.`, true);
      $("new-key").hidden = true;
      await loadKeys();
    } catch (e) { fail(e); }
  }

  // ---- rollouts (crates/server/ui/rollout.js) -------------------------------------------
  const rollout = window.TurnstileRollout({
    $, api, wsPath, approvalDialog, cell, labelCells, fail, status, renderDiff, session,
    reloadProfiles: () => loadProfiles(),
  });

  // ---- wiring -------------------------------------------------------------------------
  function init() {
    rollout.wire(() => current);
    $("signin-form").addEventListener("submit", (e) => {
      e.preventDefault();
      status("");
      signIn($("key").value.trim(), $("workspace").value.trim()).catch((err) => status(err.message));
    });
    $("signout").addEventListener("click", () => signOut("Signed out."));
    $("key").addEventListener("change", () => suggestWorkspaces($("key").value.trim()));
    const tabs = VIEWS.map((v) => $("tab-" + v));
    tabs.forEach((t, i) => {
      t.addEventListener("click", () => select(VIEWS[i]));
      t.addEventListener("keydown", (e) => {
        const visible = tabs.filter((x) => !x.hidden);
        const at = visible.indexOf(t);
        let next = null;
        if (e.key === "ArrowRight") next = visible[(at + 1) % visible.length];
        if (e.key === "ArrowLeft") next = visible[(at - 1 + visible.length) % visible.length];
        if (next) { e.preventDefault(); next.focus(); next.click(); }
      });
    });
    $("profiles-refresh").addEventListener("click", () => loadProfiles().catch(fail));
    $("breakers-refresh").addEventListener("click", () => loadBreakers().catch(fail));
    $("diff-form").addEventListener("submit", (e) => {
      e.preventDefault();
      showDiff($("diff-a").value, $("diff-b").value).catch(fail);
    });
    $("key-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        const created = await api("POST", wsPath("/keys"), { principalId: $("principal").value.trim() });
        $("new-key-principal").textContent = created.principalId;
        $("new-key-value").textContent = created.key;
        $("new-key").hidden = false;
        $("principal").value = "";
        await loadKeys();
      } catch (err) { fail(err); }
    });
    // Countdowns (pause, probe) move every second even between updates.
    setInterval(() => { if (!$("app").hidden && lanes.length) renderLanes(); }, 1000);
    const saved = sessionStorage.getItem(STORE);
    if (saved) {
      try {
        const { key, workspace } = JSON.parse(saved);
        $("workspace").value = workspace;
        signIn(key, workspace).catch((err) => signOut(err.message));
      } catch (_) { sessionStorage.removeItem(STORE); }
    }
  }

  document.addEventListener("DOMContentLoaded", init);
})();
