// accelflow web UI: polls the REST API once a second and redraws. No build step.
// Every cluster has a REST token (rest.token, or a random one): open the UI once with the link
// the cluster printed, /?token=TOKEN; the token is kept in this tab's sessionStorage (not in the
// address bar, and no cookie: other sites' requests cannot carry it) and sent as
// "Authorization: Bearer".
"use strict";

const POLL_MS = 1000;
const params = new URLSearchParams(location.search);
if (params.has("token")) {
  sessionStorage.setItem("accelflow-token", params.get("token"));
  params.delete("token");
  history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
}
let selectedJob = null;

function headers() {
  const token = sessionStorage.getItem("accelflow-token");
  return token ? { Authorization: "Bearer " + token } : {};
}

async function api(path, method = "GET") {
  const response = await fetch(path, { method, headers: headers(), cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${body.error || ""}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function device(d, resource) {
  const used = 1 - d.free.value;
  return el("div", { class: "device", "data-resource": resource, "data-address": d.address },
    el("div", { class: "addr" }, `${resource} ${d.address} `,
       d.placeholder ? el("span", { class: "muted" }, " (no info)") : null,
       d.health ? el("span", { class: `badge health ${d.health.state}` }, d.health.state) : null),
    d.quarantined ? el("div", { class: "error quarantine" }, `quarantined: ${d.quarantined}`) : null,
    el("div", { class: "bar", title: `${Math.round(used * 100)}% held` },
       el("div", { style: `width:${used * 100}%` })),
    el("div", {}, `free ${d.free.exact}`),
    d.memory ? el("div", { class: "memory" }, `memory ${bytes(d.memory.free)} free of ${bytes(d.memory.total)}`) : null,
    xids(d.health),
    el("div", { class: "props" },
       Object.entries(d.properties).map(([k, v]) => el("div", {}, `${k}: ${v}`))),
    d.holders.length
      ? el("ul", { class: "holders" }, d.holders.map(h =>
          el("li", { class: "holder" }, [`${h.subtask} · ${h.job} · ${h.share.exact}`,
            h.memory ? ` · ${bytes(h.memory)}` : "",
            h.memory_used !== null && h.memory_used !== undefined ? ` (uses ${bytes(h.memory_used)})` : ""].join(""))))
      : el("div", { class: "muted" }, "no holder"));
}

// A watched device's Xids: the count of each, the last few faults with their time.
function xids(health) {
  if (!health || !health.history.length) return null;
  const counts = Object.entries(health.xid_counts).map(([x, n]) => `Xid ${x} × ${n}`).join(", ");
  return el("div", { class: "xids" }, counts ? el("div", {}, counts) : null,
    el("ul", {}, health.history.slice(-3).reverse().map(h => el("li", { class: `fault ${h.kind}` }, h.reason))));
}

function taskexecutor(te) {
  return el("div", { class: "te", "data-te": te.id },
    el("h3", {}, te.id),
    el("div", { class: "muted" }, `slots ${te.slots.free} free of ${te.slots.total} · pid ${te.pid}`),
    te.resources.map(r => el("div", { class: "resource" },
      el("div", {}, el("b", {}, r.name), ` × ${r.amount} · driver ${r.driver} `,
         el("span", { class: `badge ${r.status}` }, r.status)),
      r.message ? el("div", { class: "error" }, r.message) : null,
      el("div", { class: "devices" }, r.devices.map(d => device(d, r.name))))));
}

function progress(job) {
  const p = job.progress;
  if (p.total) return `${p.records.toLocaleString()} / ${p.total.toLocaleString()} (${Math.floor(100 * p.records / p.total)}%)`;
  return `${p.records.toLocaleString()} records`;
}

function jobRow(job) {
  const ended = ["FINISHED", "FAILED", "CANCELED"].includes(job.state);
  const counts = Object.entries(job.subtasks_by_state).filter(([, n]) => n).map(([s, n]) => `${n} ${s}`).join(", ");
  return el("tr", { "data-job": job.id },
    el("td", {}, el("a", { href: "#", onclick: e => { e.preventDefault(); selectedJob = job.id; refresh(); } }, job.id)),
    el("td", {}, job.name),
    el("td", { class: `state-${job.state}` }, job.state),
    el("td", {}, progress(job)),
    el("td", {}, counts),
    el("td", {}, `${job.duration_s.toFixed(1)} s`),
    el("td", {}, ended ? "" : el("button", { class: "cancel", onclick: () => cancel(job.id) }, "Cancel")));
}

async function cancel(id) {
  if (!confirm(`Cancel ${id}?`)) return;
  try { await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, "POST"); } catch (e) { showError(e); }
  refresh();
}

async function jobDetail() {
  const box = document.getElementById("job-detail");
  if (!selectedJob) { box.replaceChildren(); return; }
  const job = await api(`/v1/jobs/${encodeURIComponent(selectedJob)}`);
  const rows = job.subtasks.map(s => el("tr", {},
    el("td", {}, s.name), el("td", { class: `state-${s.state}` }, s.state), el("td", {}, s.taskexecutor || ""),
    el("td", {}, s.devices.map(d => `${d.resource} ${d.address} (${d.share.exact})`).join(", ")),
    el("td", {}, s.records.map(r => `${r.operator}: ${r.in} in / ${r.out} out`).join("; "))));
  box.replaceChildren(...detailParts(job, rows));
}

// One failover of the job (docs/failover.md): its path, what was replaced or rolled back, and
// how long until every subtask ran again.
function failoverLine(f) {
  const recovered = f.recovery_s === null ? "recovering" : `recovered in ${f.recovery_s.toFixed(2)} s`;
  const what = f.path === "in-place"
    ? `replaced ${f.replaced.join(", ")}${f.standby ? ` by ${f.standby}` : ""}; ${f.rolled_back.length} rolled back in place`
    : `every subtask restarted: ${f.why_full}`;
  return `attempt ${f.attempt + 1} failed (${f.cause}): ${f.path}, ${what}, ${recovered}`;
}

// The job detail's parts; absent ones (no error, not waiting) are left out, never passed to
// replaceChildren as null (which the DOM would show as the text "null").
function detailParts(job, rows) {
  return [
    el("h2", {}, `${job.id} · ${job.name}`),
    el("div", { class: "muted job-restarts" }, `restarts: ${job.restarts}`),
    job.failovers && job.failovers.length ? el("ul", { class: "job-failovers" },
      job.failovers.map(f => el("li", {}, failoverLine(f)))) : null,
    job.error ? el("div", { class: "error" }, job.error) : null,
    job.pending ? el("div", { class: "error" }, job.pending.message,
      el("ul", {}, job.pending.reasons.map(r => el("li", {}, `${r.taskexecutor}: ${r.reason}`)))) : null,
    el("table", {}, el("thead", {}, el("tr", {}, ["Subtask", "State", "TaskExecutor", "Devices", "Records"].map(h => el("th", {}, h)))),
       el("tbody", {}, rows)),
    checkpointsPanel(job.checkpoints),
  ].filter(part => part !== null);
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// Checkpoints of the job (GET /v1/jobs/{id}/checkpoints holds the same): counts, the last
// restore and the history, newest first. Left out for a job that never checkpointed.
function checkpointsPanel(c) {
  if (!c || (!c.enabled && !c.history.length && !c.restored)) return null;
  const restored = c.restored
    ? `last restore: checkpoint ${c.restored.id} (attempt ${c.restored.attempt + 1}) from ${c.restored.path}`
    : "last restore: none";
  const rows = c.history.map(r => el("tr", { "data-checkpoint": r.id },
    el("td", {}, r.id),
    el("td", { class: `state-${r.status}` }, r.status),
    el("td", {}, r.savepoint ? "savepoint" : "checkpoint"),
    el("td", {}, new Date(r.trigger_time * 1000).toLocaleTimeString()),
    el("td", {}, r.duration_s === null ? "" : `${(r.duration_s * 1000).toFixed(0)} ms`),
    el("td", {}, bytes(r.size)),
    el("td", { class: "path" }, r.failure ? el("span", { class: "error" }, r.failure) : (r.path || ""))));
  return el("div", { class: "checkpoints" },
    el("h3", {}, "Checkpoints"),
    el("div", { class: "muted" },
       `${c.counts.completed} completed · ${c.counts.failed} failed · ${c.counts.in_progress} in progress · `,
       el("span", { class: "restored" }, restored)),
    el("table", {},
       el("thead", {}, el("tr", {}, ["ID", "Status", "Type", "Triggered", "Duration", "Size", "Path"].map(h => el("th", {}, h)))),
       el("tbody", {}, rows)));
}

// The header line, its parts joined by " · ": one part per external resource, none without
// any (e.g. "1 TaskExecutors · slots 0/1 free · 1 active job(s)").
function summary(overview) {
  return [
    `${overview.taskexecutors} TaskExecutors`,
    `slots ${overview.slots.free}/${overview.slots.total} free`,
    ...Object.entries(overview.resources).map(([n, r]) => `${n} ${r.free.exact}/${r.total.exact} free`),
    `${overview.jobs.RUNNING + overview.jobs.PENDING} active job(s)`,
  ].join(" · ");
}

function showError(e) { document.getElementById("status").textContent = e.message; }

async function refresh() {
  try {
    const [overview, tes, jobs] = await Promise.all([api("/v1/overview"), api("/v1/taskexecutors"), api("/v1/jobs")]);
    document.getElementById("summary").textContent = summary(overview);
    document.getElementById("taskexecutors").replaceChildren(...tes.taskexecutors.map(taskexecutor));
    document.querySelector("#jobs tbody").replaceChildren(...jobs.jobs.slice().reverse().map(jobRow));
    await jobDetail();
    document.getElementById("status").textContent = "";
  } catch (e) {
    showError(e);
  }
}

refresh();
setInterval(refresh, POLL_MS);
