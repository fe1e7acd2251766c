// The service network console: polls the observer's API every two seconds and draws the network (plain DOM and
// SVG; no framework, nothing loaded from elsewhere). Rates are differences of cumulative counters between polls.

const API = "/api/v2alpha1";
const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";

let previous = null; // {time, services, sitepairs} of the last poll

// A page opened as https://user:password@host/ (a common way to hand over basic-auth credentials) has them in its
// URL: a request built from that URL (a relative one resolves against it) is refused by the browser, and the
// browser never learnt them for the API either, since only /api/ asks. So the API is asked at the page's origin,
// with the credentials the page was opened with, if any.
const AUTHORIZATION = basicAuthorization(new URL(document.URL));

function basicAuthorization(url) {
  if (!url.username && !url.password) return {};
  const pair = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  const bytes = new TextEncoder().encode(pair);
  return { Authorization: `Basic ${btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""))}` };
}

async function get(path) {
  const resp = await fetch(new URL(`${API}/${path}`, location.origin), { cache: "no-store", headers: AUTHORIZATION });
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

function el(tag, attrs = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function human(n) {
  if (!Number.isFinite(n)) return "-";
  const units = ["", "k", "M", "G", "T"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return (i === 0 && Number.isInteger(n) ? String(n) : n.toFixed(1)) + units[i];
}

function rate(now, before, dt) {
  if (before === undefined || before === null || now === undefined || dt <= 0) return 0;
  return Math.max(0, (now - before) / dt);
}

function cell(row, text, cls) {
  const td = el("td", cls ? { class: cls } : {}, text);
  row.appendChild(td);
  return td;
}

function drawTopology(sites, links, sitepairs) {
  const svg = document.getElementById("topology");
  svg.replaceChildren();
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "6",
    markerHeight: "6", orient: "auto-start-reverse" });
  marker.appendChild(el("svg:path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#f9a825" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const w = 640, h = 400, r = Math.min(w, h) / 2 - 70;
  const pos = new Map();
  sites.forEach((s, i) => {
    const a = (2 * Math.PI * i) / Math.max(1, sites.length) - Math.PI / 2;
    pos.set(s.identity, sites.length === 1 ? [w / 2, h / 2] : [w / 2 + r * Math.cos(a), h / 2 + r * Math.sin(a)]);
  });
  for (const l of links) {
    const a = pos.get(l.sourceSiteId), b = pos.get(l.destinationSiteId);
    if (!a || !b) continue;
    const g = el("svg:g", { class: `link ${l.status}`, "data-source": l.sourceSiteName,
      "data-destination": l.destinationSiteName || "", "data-status": l.status });
    g.appendChild(el("svg:line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1] }));
    g.appendChild(el("svg:text", { x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2 - 6 },
      `${l.name} (cost ${l.cost ?? "-"}, ${l.status})`));
    svg.appendChild(g);
  }
  for (const p of sitepairs) {
    const a = pos.get(p.sourceId), b = pos.get(p.destinationId);
    if (!a || !b || a === b) continue;
    const g = el("svg:g", { class: "traffic" });
    const dx = b[0] - a[0], dy = b[1] - a[1], len = Math.hypot(dx, dy) || 1, off = 8;
    const ox = (-dy / len) * off, oy = (dx / len) * off, shrink = 34 / len;
    g.appendChild(el("svg:line", { x1: a[0] + dx * shrink + ox, y1: a[1] + dy * shrink + oy,
      x2: b[0] - dx * shrink + ox, y2: b[1] - dy * shrink + oy }));
    svg.appendChild(g);
  }
  for (const s of sites) {
    const [x, y] = pos.get(s.identity);
    const g = el("svg:g", { class: "site", "data-site": s.name });
    g.appendChild(el("svg:circle", { cx: x, cy: y, r: 28 }));
    g.appendChild(el("svg:text", { x, y: y + 46 }, s.name));
    g.appendChild(el("svg:text", { x, y: y + 60 }, `${s.routerCount} router${s.routerCount === 1 ? "" : "s"}`));
    svg.appendChild(g);
  }
}

function drawServices(services, processes, traffic, dt) {
  const body = document.querySelector("#services tbody");
  body.replaceChildren();
  for (const s of services) {
    const t = traffic.services[s.name] || {};
    const before = previous?.services?.[s.name];
    const row = el("tr", { "data-service": s.name });
    cell(row, s.name);
    cell(row, String(s.listenerCount), "num");
    cell(row, String(s.connectorCount), "num");
    cell(row, String(processes.filter((p) => (p.services || []).some((x) => x.startsWith(`${s.name}@`))).length), "num");
    cell(row, String(t.open ?? 0), "num");
    cell(row, human(rate(t.opened, before?.opened, dt)), "num");
    cell(row, human(rate((t.bytesIn ?? 0) + (t.bytesOut ?? 0), before ? before.bytesIn + before.bytesOut : undefined, dt)), "num");
    cell(row, human(rate(t.httpRequests, before?.httpRequests, dt)), "num");
    const req = t.requests || {};
    cell(row, human(req["2xx"] ?? 0), "num");
    cell(row, human(req["4xx"] ?? 0), (req["4xx"] ?? 0) > 0 ? "num error" : "num");
    cell(row, human(req["5xx"] ?? 0), (req["5xx"] ?? 0) > 0 ? "num error" : "num");
    const latency = t.httpRequests ? `${(t.latencyUs / t.httpRequests / 1000).toFixed(2)} ms` : "-";
    cell(row, latency, "num");
    cell(row, String(t.refused ?? 0), (t.refused ?? 0) > 0 ? "num error" : "num");
    if (!s.isBound) row.classList.add("error");
    body.appendChild(row);
  }
}

function drawSitePairs(pairs, traffic, dt) {
  const body = document.querySelector("#sitepairs tbody");
  body.replaceChildren();
  for (const p of pairs) {
    const t = traffic.sitepairs[p.identity] || {};
    const before = previous?.sitepairs?.[p.identity];
    const row = el("tr", { "data-pair": `${p.sourceName}->${p.destinationName}` });
    cell(row, p.sourceName);
    cell(row, p.destinationName);
    cell(row, human(t.opened ?? 0), "num");
    cell(row, human(rate(t.opened, before?.opened, dt)), "num");
    cell(row, human(rate((t.bytesIn ?? 0) + (t.bytesOut ?? 0), before ? before.bytesIn + before.bytesOut : undefined, dt)), "num");
    body.appendChild(row);
  }
}

function drawProcesses(processes) {
  const body = document.querySelector("#processes tbody");
  body.replaceChildren();
  for (const p of processes) {
    const row = el("tr", { "data-process": p.name });
    cell(row, p.name);
    cell(row, p.siteName);
    cell(row, p.componentName);
    cell(row, p.role);
    cell(row, p.binding);
    cell(row, (p.services || []).map((s) => s.split("@")[0]).join(", "));
    body.appendChild(row);
  }
}

function drawFigures(sites, links, traffic, dt) {
  const sum = (obj, f) => Object.values(obj || {}).reduce((a, t) => a + (t[f] ?? 0), 0);
  const now = { opened: sum(traffic.services, "opened"), bytes: sum(traffic.services, "bytesIn") + sum(traffic.services, "bytesOut"),
    requests: sum(traffic.services, "httpRequests") };
  const before = previous ? { opened: sum(previous.services, "opened"),
    bytes: sum(previous.services, "bytesIn") + sum(previous.services, "bytesOut"),
    requests: sum(previous.services, "httpRequests") } : null;
  document.getElementById("sites-count").textContent = String(sites.length);
  document.getElementById("links-count").textContent = String(links.filter((l) => l.status === "up").length);
  document.getElementById("conn-rate").textContent = human(rate(now.opened, before?.opened, dt));
  document.getElementById("byte-rate").textContent = human(rate(now.bytes, before?.bytes, dt));
  document.getElementById("req-rate").textContent = human(rate(now.requests, before?.requests, dt));
  const total = document.getElementById("total-connections");
  total.textContent = String(now.opened);
  total.dataset.value = String(now.opened);
  const reqs = document.getElementById("total-requests");
  reqs.textContent = String(now.requests);
  reqs.dataset.value = String(now.requests);
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [sites, links, services, processes, sitepairs, traffic] = await Promise.all([
      get("sites"), get("routerlinks"), get("services"), get("processes"), get("sitepairs"), get("internal/traffic"),
    ]);
    const dt = previous ? (traffic.time - previous.time) / 1e6 : 0;
    drawFigures(sites.results, links.results, traffic, dt);
    drawTopology(sites.results, links.results, sitepairs.results);
    drawServices(services.results, processes.results, traffic, dt);
    drawSitePairs(sitepairs.results, traffic, dt);
    drawProcesses(processes.results);
    if (traffic.error) {
      status.textContent = `router: ${traffic.error}`;
      status.className = "status error";
    } else {
      status.textContent = `updated ${new Date(traffic.updated / 1000).toLocaleTimeString()}`;
      status.className = "status";
    }
    document.body.dataset.polls = String((Number(document.body.dataset.polls) || 0) + 1);
    if (!previous || traffic.time !== previous.time) previous = traffic;
  } catch (e) {
    status.textContent = `observer unreachable: ${e.message}`;
    status.className = "status error";
  }
}

refresh();
setInterval(refresh, POLL_MS);
