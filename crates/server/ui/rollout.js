// turnstile console: the rollout panel of the profiles view (issue 33, docs/console.md).
// Start a rollout from a revision diff (the candidate profile against the current one), watch
// its decision comparison (polled once a second while the view is open), promote or abort it,
// each with its approval on record; the past rollouts from the audit log. Talks only to the
// HTTP API (`…/rollouts`, `…/rollouts/current`, `…/promote`, `…/abort`); counts only, never a
// principal.
"use strict";

window.TurnstileRollout = function (ctx) {
  const { $, api, wsPath, approvalDialog, cell, labelCells, fail, status, renderDiff, session, reloadProfiles } = ctx;
  const POLL_MS = 1000;
  let timer = null;
  let running = null;

  const share = (r) => (r.mode === "canary" ? `canary, ${Math.round(r.canaryShare * 1000) / 10}% of principals` : "shadow");

  async function current() {
    try {
      return await api("GET", wsPath("/rollouts/current"));
    } catch (e) {
      if (e.status === 404 && e.code === "no-rollout") return null;
      throw e;
    }
  }

  function renderRunning(r) {
    running = r;
    $("rollout-running").hidden = !r;
    $("rollout-form").hidden = !session.admin || !!r;
    const badge = $("rollout-state");
    badge.textContent = r ? `${r.mode} running` : "none";
    badge.className = r ? "badge running" : "badge";
    $("rollout").dataset.state = r ? "running" : "none";
    if (!r) return;
    $("rollout-revision").textContent = r.revision;
    $("rollout-digest").textContent = r.digest;
    $("rollout-mode").textContent = share(r);
    $("rollout-started").textContent = new Date(r.startedAtEpochMs).toLocaleString();
    const d = r.decisions;
    const counts = { compared: d.compared, agree: d.agree, differ: d.differ, ...d.candidateOnly };
    for (const [field, value] of Object.entries(counts)) {
      const td = $("rollout-decisions").querySelector(`td[data-field="${field}"]`);
      if (td) td.textContent = String(value);
    }
    labelCells($("rollout-decisions"));
    const reasons = Object.entries(d.byReason).sort((a, b) => b[1] - a[1]);
    $("rollout-reasons").textContent = reasons.length ? reasons.map(([k, v]) => `${k} ${v}`).join(", ") : "none";
  }

  function renderHistory(records) {
    const body = $("rollout-history").tBodies[0];
    body.replaceChildren(...[...records].reverse().map((r) => {
      const tr = document.createElement("tr");
      tr.dataset.event = r.event;
      tr.dataset.revision = r.revision;
      cell(tr, new Date(r.atEpochMs).toLocaleString());
      cell(tr, r.event, "event");
      cell(tr, r.revision, "revision");
      cell(tr, share(r), "mode");
      cell(tr, r.decisions ? `${r.decisions.compared} / ${r.decisions.differ}` : "–", "decisions");
      cell(tr, r.actorKeyId || "–", "actor", "digest");
      cell(tr, r.approvedBy || "–", "approved-by");
      cell(tr, r.note || "–", "note", "note");
      return tr;
    }));
    labelCells($("rollout-history"));
    if (!records.length) {
      const tr = document.createElement("tr");
      cell(tr, "No rollouts recorded.").colSpan = 8;
      body.appendChild(tr);
    }
  }

  // The candidate starts as the current revision's profile, to edit (admin only).
  async function prefill(currentRevision) {
    const area = $("rollout-profile");
    if (!session.admin || area.value.trim() || !currentRevision) return;
    const rev = await api("GET", wsPath("/profiles/" + encodeURIComponent(currentRevision)));
    if (!area.value.trim()) area.value = JSON.stringify(rev.profile, null, 2);
  }

  function candidate() {
    try {
      return JSON.parse($("rollout-profile").value);
    } catch (e) {
      throw new Error("The candidate profile is not valid JSON: " + e.message);
    }
  }

  async function preview(currentRevision) {
    const profile = candidate();
    const rev = await api("GET", wsPath("/profiles/" + encodeURIComponent(currentRevision)));
    renderDiff($("rollout-diff"), { label: currentRevision, digest: rev.digest, profile: rev.profile }, { label: $("rollout-candidate").value.trim() || "candidate", digest: "", profile });
  }

  async function start() {
    const profile = candidate();
    const revision = $("rollout-candidate").value.trim();
    const mode = $("rollout-mode-select").value;
    const body = { revision, profile, mode };
    if (mode === "canary") body.canaryShare = Number($("rollout-share").value);
    const approval = await approvalDialog(`Start a ${mode} rollout of revision ${revision} in workspace ${session.workspace}? ${mode === "shadow" ? "It changes no answer." : "Its share of principals is decided by the candidate at once."}`);
    if (!approval) return;
    const r = await api("POST", wsPath("/rollouts"), { ...body, ...approval });
    status(`Rollout of ${r.revision} started (${r.mode}).`, true);
    $("rollout-diff").replaceChildren();
    await load();
  }

  async function end(action) {
    if (!running) return;
    const text = action === "promote"
      ? `Promote revision ${running.revision}? It becomes the current revision for every principal at once.`
      : `Abort the rollout of ${running.revision}? The current revision stays.`;
    const approval = await approvalDialog(text);
    if (!approval) return;
    const record = await api("POST", wsPath(`/rollouts/current/${action}`), approval);
    status(`Rollout of ${record.revision} ${record.event}.`, true);
    $("rollout-profile").value = "";
    await load();
    if (action === "promote") await reloadProfiles();
  }

  async function load(currentRevision) {
    const [r, history] = await Promise.all([current(), api("GET", wsPath("/rollouts"))]);
    renderRunning(r);
    renderHistory(history.records);
    if (!r) await prefill(currentRevision);
    schedule();
  }

  // While the profiles view is open and a rollout runs, its comparison is read once a second.
  function schedule() {
    clearTimeout(timer);
    if (!running) return;
    timer = setTimeout(async () => {
      if (document.body.dataset.view !== "profiles" || $("app").hidden) return;
      try {
        renderRunning(await current());
        if (!running) await load();
      } catch (e) { fail(e); return; }
      schedule();
    }, POLL_MS);
  }

  function wire(currentRevision) {
    $("rollout-mode-select").addEventListener("change", () => { $("rollout-share").disabled = $("rollout-mode-select").value !== "canary"; });
    $("rollout-preview").addEventListener("click", () => preview(currentRevision()).catch(fail));
    $("rollout-form").addEventListener("submit", (e) => { e.preventDefault(); start().catch(fail); });
    $("rollout-promote").addEventListener("click", () => end("promote").catch(fail));
    $("rollout-abort").addEventListener("click", () => end("abort").catch(fail));
  }

  return { load, wire };
};
