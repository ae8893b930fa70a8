// The dashboard: polls the read endpoints every few seconds; no build step, no dependencies.
"use strict";
const REFRESH_MS = 3000;
const state = { region: "all", window: "1h", rank: "volume", selected: null, snapshotMs: null, displays: {} };
const $ = (id) => document.getElementById(id);

function initFromUrl() {
  // Query parameters preselect the view, e.g. /?region=US&window=24h&rank=rise&tag=worldcup.
  const q = new URLSearchParams(location.search);
  for (const key of ["region", "window", "rank"]) if (q.get(key)) state[key] = q.get(key);
  state.selected = q.get("tag");
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function arrow(change) {
  if (change === null || change === undefined) return '<span class="new">new</span>';
  if (change > 0) return `<span class="up" title="up ${change}">▲</span>`;
  if (change < 0) return `<span class="down" title="down ${-change}">▼</span>`;
  return '<span class="muted">–</span>';
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function renderTrending(doc) {
  const list = $("trending");
  list.innerHTML = "";
  for (const e of doc.entries) {
    state.displays[e.tag] = e.display || e.tag;
    const li = document.createElement("li");
    li.dataset.tag = e.tag;
    if (e.tag === state.selected) li.className = "selected";
    const figure = state.rank === "rise" && e.score != null ? `×${Number(e.score).toFixed(1)}` : e.count.toLocaleString();
    li.innerHTML = `<span class="rank">${Number(e.rank)}</span>${arrow(e.rank_change)}` +
      `<span class="tag">#${escapeHtml(e.display || e.tag)}<span class="badge ${escapeHtml(e.source || "")}">${escapeHtml(e.source || "")}</span></span>` +
      `<span class="count">${figure}</span>`;
    li.addEventListener("click", () => select(e.tag));
    list.appendChild(li);
  }
  $("empty").hidden = doc.entries.length > 0;
  state.snapshotMs = doc.computed_at_ms;
  if (!state.selected && doc.entries.length) select(doc.entries[0].tag);
}

function renderAge() {
  const status = $("status");
  if (state.snapshotMs == null) { status.textContent = "no snapshot yet"; return; }
  const age = Math.max(0, Math.round((Date.now() - state.snapshotMs) / 1000));
  status.textContent = `updated ${age} s ago`;
}

function sparkline(points) {
  const svg = $("sparkline");
  const counts = points.map((p) => p.count);
  const max = Math.max(1, ...counts);
  const step = 240 / Math.max(1, counts.length - 1);
  const coords = counts.map((c, i) => `${(i * step).toFixed(1)},${(46 - (c / max) * 44).toFixed(1)}`).join(" ");
  svg.innerHTML = `<polyline points="${coords}"></polyline>`;
}

async function renderDetail() {
  const tag = state.selected;
  if (!tag) return;
  const enc = encodeURIComponent(tag);
  const region = encodeURIComponent(state.region);
  const [count, series, posts] = await Promise.all([
    getJson(`/tags/${enc}/count?window=${state.window}&region=${region}`),
    getJson(`/tags/${enc}/series?window=24h&step=1h&region=${region}`),
    getJson(`/tags/${enc}/posts?k=2&sort=top`),
  ]);
  $("detail").hidden = false;
  $("detail-tag").textContent = `#${state.displays[tag] || count.display}`;
  $("detail-count").innerHTML = `<b>${count.count.toLocaleString()}</b> posts in the last ${state.window} ` +
    `(between ${count.lower_bound.toLocaleString()} and ${count.upper_bound.toLocaleString()}) ` +
    `<span class="badge ${count.source}">${count.source}</span>`;
  sparkline(series.points);
  $("posts").innerHTML = posts.posts.map((p) =>
    `<li>${escapeHtml(p.text || p.post_id)} <span class="muted">(${escapeHtml(p.region || "?")}, score ${Number(p.score)})</span></li>`).join("")
    || '<li class="muted">no posts yet</li>';
}

function select(tag) {
  state.selected = tag;
  for (const li of $("trending").children) li.classList.toggle("selected", li.dataset.tag === tag);
  renderDetail().catch(showError);
}

function showError(error) { $("status").textContent = `error: ${error.message}`; }

async function refresh() {
  try {
    const q = `window=${state.window}&region=${encodeURIComponent(state.region)}&rank=${state.rank}&k=20`;
    renderTrending(await getJson(`/trending?${q}`));
    renderAge();
    await renderDetail();
  } catch (error) {
    showError(error);
  }
}

async function setup() {
  initFromUrl();
  const regions = await getJson("/regions").catch(() => ["all"]);
  $("region").innerHTML = regions.map((r) => `<option value="${r}">${r === "all" ? "all (worldwide)" : r}</option>`).join("");
  $("region").value = state.region;
  $("window").value = state.window;
  $("region").addEventListener("change", (ev) => { state.region = ev.target.value; state.selected = null; refresh(); });
  $("window").addEventListener("change", (ev) => { state.window = ev.target.value; refresh(); });
  for (const button of document.querySelectorAll("[data-rank]")) {
    button.classList.toggle("on", button.dataset.rank === state.rank);
    button.addEventListener("click", () => {
      state.rank = button.dataset.rank;
      for (const b of document.querySelectorAll("[data-rank]")) b.classList.toggle("on", b === button);
      refresh();
    });
  }
  await refresh();
  setInterval(refresh, REFRESH_MS);
  setInterval(renderAge, 1000);
}

setup();
