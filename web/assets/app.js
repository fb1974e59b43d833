// goflink dashboard: a few pages over the JobManager's JSON API, refreshed every 2 seconds.
"use strict";

const refreshMs = 2000;
let timer = null;

// api GETs (or POSTs) a path of the JSON API; a 401 asks for the token once and retries.
async function api(path, method = "GET", body = undefined) {
  const headers = {};
  const token = sessionStorage.getItem("goflink-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (resp.status === 401) {
    const t = window.prompt("This cluster needs a token (security.auth.token-file):");
    if (t) {
      sessionStorage.setItem("goflink-token", t.trim());
      return api(path, method, body);
    }
  }
  const data = await resp.json().catch(() => ({ errors: [resp.statusText] }));
  if (!resp.ok) throw new Error((data.errors || [resp.statusText]).join("; "));
  return data;
}

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const statusTag = s => `<span class="status ${esc(s)}">${esc(s)}</span>`;
const when = t => (t ? new Date(t).toLocaleString() : "—");
function rate(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return n.toFixed(0);
}
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
const pct = ms => Math.round(ms / 10) + "%";
const wmText = wm => (wm === undefined || wm === null ? "no watermark" : new Date(wm).toISOString().replace("T", " ").replace("Z", ""));

// route renders the page the location's hash names.
async function route() {
  const main = document.getElementById("main");
  const hash = location.hash.replace(/^#/, "") || "/";
  try {
    let m;
    if ((m = hash.match(/^\/job\/([0-9a-fA-F-]+)$/))) await jobPage(main, m[1]);
    else if (hash === "/taskmanagers") await taskManagersPage(main);
    else await overviewPage(main);
    document.getElementById("refreshed").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    main.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
  clearTimeout(timer);
  timer = setTimeout(route, refreshMs);
}

async function overviewPage(main) {
  const [o, jobs] = await Promise.all([api("overview"), api("jobs/overview")]);
  const card = (n, l) => `<div class="card"><div class="n">${n}</div><div class="l">${l}</div></div>`;
  main.innerHTML = `<h1>Overview</h1>
    <div class="cards">
      ${card(o.taskmanagers, "TaskManagers")}
      ${card(o.slots_available + " / " + o.slots_total, "free / total slots")}
      ${card(o.jobs_running, "running jobs")}
      ${card(o.jobs_finished, "finished")}
      ${card(o.jobs_cancelled, "cancelled")}
      ${card(o.jobs_failed, "failed")}
    </div>
    <h2>JobManagers</h2>
    <table id="jobmanagers"><tr><th>ID</th><th>Address</th><th>Role</th><th class="num">Term</th></tr>
      ${o.jobmanagers.map(j => `<tr><td>${esc(j.id)}${j.leader ? " ★" : ""}</td><td>${esc(j.address)}</td>
        <td>${esc(j.error ? "unreachable: " + j.error : j.role)}</td><td class="num">${j.term}</td></tr>`).join("")}
    </table>
    <h2>Jobs</h2>
    <table id="jobs"><tr><th>Name</th><th>Status</th><th>Started</th><th>Ended</th><th>ID</th></tr>
      ${jobs.jobs.map(j => `<tr><td><a class="job-link" data-id="${esc(j.id)}" href="#/job/${esc(j.id)}">${esc(j.name)}</a></td>
        <td>${statusTag(j.status)}</td><td>${when(j.start_time)}</td><td>${when(j.end_time)}</td><td class="muted">${esc(j.id)}</td></tr>`).join("")
        || `<tr><td colspan="5" class="muted">no jobs</td></tr>`}
    </table>`;
}

async function taskManagersPage(main) {
  const tms = await api("taskmanagers");
  main.innerHTML = `<h1>TaskManagers</h1>
    <table id="taskmanagers"><tr><th>ID</th><th>Address</th><th class="num">Slots</th><th class="num">Free</th><th>Last heartbeat</th><th class="num">Tasks</th></tr>
      ${tms.taskmanagers.map(t => `<tr class="taskmanager"><td>${esc(t.id)}</td><td>${esc(t.address)}</td><td class="num">${t.slots}</td>
        <td class="num">${t.free_slots}</td><td>${when(t.last_heartbeat)}</td><td class="num">${t.tasks.length}</td></tr>`).join("")
        || `<tr><td colspan="6" class="muted">no TaskManagers registered</td></tr>`}
    </table>
    ${tms.taskmanagers.map(t => `<h2>${esc(t.id)}</h2>
      <table class="tm-tasks"><tr><th>Job</th><th>Operator</th><th class="num">Subtask</th><th>Status</th><th class="num">In/s</th>
        <th class="num">Out/s</th><th class="num">Busy</th><th class="num">Backpressured</th></tr>
        ${t.tasks.map(k => `<tr class="tm-task"><td><a href="#/job/${esc(k.job_id)}">${esc(k.job_name)}</a></td><td>${esc(k.operator)}</td>
          <td class="num">${k.subtask}</td><td>${statusTag(k.status)}</td><td class="num">${rate(k.records_in_per_second)}</td>
          <td class="num">${rate(k.records_out_per_second)}</td><td class="num">${pct(k.busy_ms_per_second)}</td>
          <td class="num">${pct(k.backpressured_ms_per_second)}</td></tr>`).join("") || `<tr><td colspan="8" class="muted">no tasks</td></tr>`}
      </table>`).join("")}`;
}

async function jobPage(main, id) {
  const [job, cps, exc] = await Promise.all([api("jobs/" + id), api("jobs/" + id + "/checkpoints"), api("jobs/" + id + "/exceptions")]);
  const running = !["FINISHED", "CANCELED", "FAILED"].includes(job.status);
  const result = document.getElementById("action-result");
  const kept = result && result.dataset.job === id ? result.outerHTML : `<span id="action-result" data-job="${esc(id)}"></span>`;
  main.innerHTML = `<h1>${esc(job.name)} ${statusTag(job.status)}</h1>
    <p class="muted">${esc(job.id)} · parallelism ${job.parallelism} · restarts ${job.restarts} · started ${when(job.start_time)}
      ${job.failure_cause ? `<br><span class="error">${esc(job.failure_cause)}</span>` : ""}</p>
    <div class="actions">${running ? `<button id="cancel" class="danger">Cancel</button><button id="checkpoint">Trigger checkpoint</button><button id="savepoint">Trigger savepoint</button>` : ""}${kept}</div>
    <h2>Graph</h2>
    <div class="legend">${[["idle", 0, 0], ["busy", 1000, 0], ["backpressured", 0, 1000]].map(([l, b, p]) =>
      `<span><svg width="12" height="12"><rect width="12" height="12" fill="${colour(b, p)}" stroke="#999"/></svg> ${l}</span>`).join("")}</div>
    ${graph(job)}
    <h2>Tasks</h2>
    <table id="tasks"><tr><th>Operator</th><th class="num">Subtask</th><th>Status</th><th>TaskManager</th><th class="num">Records in</th>
      <th class="num">Records out</th><th class="num">In/s</th><th class="num">Out/s</th><th class="num">Busy</th><th class="num">Backpressured</th><th>Watermark</th></tr>
      ${job.vertices.flatMap(v => v.tasks.map(t => `<tr><td>${esc(v.name)}</td><td class="num">${t.subtask}</td><td>${statusTag(t.status)}</td>
        <td>${esc(t.taskmanager)}</td><td class="num">${t.records_in}</td><td class="num">${t.records_out}</td>
        <td class="num">${rate(t.records_in_per_second)}</td><td class="num">${rate(t.records_out_per_second)}</td>
        <td class="num">${pct(t.busy_ms_per_second)}</td><td class="num">${pct(t.backpressured_ms_per_second)}</td>
        <td>${t.input_watermark !== undefined ? esc(wmText(t.input_watermark)) : ""}</td></tr>`)).join("")}
    </table>
    <h2>Checkpoints <span class="muted">(${cps.counts.completed} completed, ${cps.counts.failed} failed, ${cps.counts.in_progress} in progress)</span></h2>
    <table id="checkpoints"><tr><th class="num">ID</th><th>Status</th><th>Triggered</th><th class="num">Duration</th><th class="num">Size</th>
      <th class="num">In flight</th><th class="num">Alignment</th><th class="num">Acknowledged</th><th>Failure</th></tr>
      ${cps.history.slice(0, 30).map(c => `<tr class="checkpoint" data-status="${esc(c.status)}"><td class="num">${c.id}${c.savepoint ? " (savepoint)" : c.checkpoint_type === "UNALIGNED_CHECKPOINT" ? " (unaligned)" : ""}</td>
        <td>${statusTag(c.status)}</td><td>${when(c.trigger_time)}</td><td class="num">${c.duration_ms} ms</td>
        <td class="num">${bytes(c.state_size_bytes)}</td><td class="num">${bytes(c.persisted_data)}</td><td class="num">${c.alignment_ms} ms</td><td class="num">${c.acknowledged}/${c.total}</td>
        <td>${esc(c.failure_reason ? c.failure_reason + ": " + c.failure : c.failure)}</td></tr>`).join("")
        || `<tr><td colspan="9" class="muted">no checkpoints</td></tr>`}
    </table>
    <h2>Exceptions</h2>
    <ul class="exceptions">
      ${exc.exceptions.map(e => `<li class="exception"><b>${esc(e.task)}</b> on ${esc(e.taskmanager || "—")} at ${when(e.time)}
        ${e.handling ? `· ${esc(e.handling)}${e.failover ? " (" + esc(e.failover) + ")" : ""}` : ""}<pre>${esc(e.cause)}</pre></li>`).join("")
        || `<li class="muted" style="list-style:none">no exceptions</li>`}
    </ul>`;
  if (running) {
    const act = (btn, label, fn) => document.getElementById(btn).addEventListener("click", async () => {
      const out = document.getElementById("action-result");
      out.textContent = label + "…";
      try { out.textContent = await fn(); } catch (e) { out.innerHTML = `<span class="error">${esc(e.message)}</span>`; }
    });
    act("cancel", "cancelling", async () => {
      if (!window.confirm("Cancel job " + job.name + "?")) return "";
      await api("jobs/" + id + "/cancel", "POST");
      return "cancelling";
    });
    act("checkpoint", "checkpointing", async () => {
      const c = await api("jobs/" + id + "/checkpoints", "POST");
      return `checkpoint ${c.id} ${c.status.toLowerCase()}`;
    });
    act("savepoint", "taking a savepoint", async () => {
      const s = await api("jobs/" + id + "/savepoints", "POST", {});
      return "savepoint at " + s.savepoint_path;
    });
  }
}

// colour mixes idle (light blue), busy (red) and backpressured (grey-violet) by the busiest
// subtask's milliseconds per second, as Flink's web UI colours its vertices.
function colour(busy, bp) {
  const b = Math.min(busy, 1000) / 1000, p = Math.min(bp, 1000) / 1000, i = Math.max(0, 1 - b - p);
  const mix = (idle, busyC, bpC) => Math.round(idle * i + busyC * b + bpC * p);
  return `rgb(${mix(222, 229, 120)},${mix(236, 83, 110)},${mix(250, 83, 150)})`;
}

// graph draws the job's vertices in columns by their depth from the sources, with the edges
// between them.
function graph(job) {
  const W = 210, H = 92, GX = 70, GY = 26, PAD = 16;
  const depth = {};
  const ids = job.vertices.map(v => v.id);
  ids.forEach(id => (depth[id] = 0));
  for (let pass = 0; pass < ids.length; pass++) {
    for (const e of job.edges) depth[e.target] = Math.max(depth[e.target] ?? 0, (depth[e.source] ?? 0) + 1);
  }
  const cols = {};
  const pos = {};
  for (const v of job.vertices) {
    const d = depth[v.id];
    cols[d] = (cols[d] || 0) + 1;
    pos[v.id] = { x: PAD + d * (W + GX), y: PAD + (cols[d] - 1) * (H + GY) };
  }
  const width = PAD * 2 + (Math.max(0, ...Object.keys(cols).map(Number)) + 1) * (W + GX) - GX;
  const height = PAD * 2 + Math.max(1, ...Object.values(cols)) * (H + GY) - GY;
  const edges = job.edges.map(e => {
    const a = pos[e.source], b = pos[e.target];
    if (!a || !b) return "";
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    return `<path d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 6},${y2}" fill="none" stroke="#8a94a6" stroke-width="1.5" marker-end="url(#arrow)"/>
      <text class="elabel" x="${mx}" y="${(y1 + y2) / 2 - 4}" text-anchor="middle">${esc(e.partitioner)}${e.side_output ? " · " + esc(e.side_output) : ""}</text>`;
  }).join("");
  const boxes = job.vertices.map(v => {
    const p = pos[v.id];
    const ops = v.operators.map(o => o.name).join(" → ");
    return `<g class="vertex" data-name="${esc(v.name)}" transform="translate(${p.x},${p.y})">
      <title>${esc(v.operators.map(o => o.name + " (" + o.type + ")").join("\n"))}</title>
      <rect width="${W}" height="${H}" rx="6" fill="${colour(v.busy_max_ms_per_second, v.backpressured_max_ms_per_second)}" stroke="#5b6475"/>
      <text class="vname" x="10" y="18">${esc(ops.length > 30 ? ops.slice(0, 29) + "…" : ops)}</text>
      <text x="10" y="36">parallelism ${v.parallelism}</text>
      <text x="10" y="53">in ${rate(v.records_in_per_second)}/s · out ${rate(v.records_out_per_second)}/s</text>
      <text x="10" y="70">busy ${pct(v.busy_max_ms_per_second)} · backpressured ${pct(v.backpressured_max_ms_per_second)}</text>
      <text x="10" y="86" class="muted">${v.input_watermark !== undefined ? "wm " + esc(wmText(v.input_watermark)) : "no watermark"}</text>
    </g>`;
  }).join("");
  return `<svg class="graph" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
      <path d="M0,0 L10,5 L0,10 z" fill="#8a94a6"/></marker></defs>${edges}${boxes}</svg>`;
}

window.addEventListener("hashchange", route);
route();
