// The dashboard: polls /v1/dashboard and draws it. Data only ever goes into the page as
// text (textContent, attributes), never as HTML: keys and errors come from clients and
// config files.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, props, children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children || []) node.appendChild(child);
  return node;
}

function number(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en");
}

// Three series as polylines on one shared scale.
function sparkline(series) {
  const width = 300, height = 56, pad = 3;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const longest = Math.max(2, ...series.map((s) => s.values.length));
  const top = Math.max(1, ...series.flatMap((s) => s.values));
  for (const s of series) {
    if (s.values.length === 0) continue;
    const points = s.values.map((v, i) => {
      const x = ((i + longest - s.values.length) / (longest - 1)) * width;
      const y = height - pad - (v / top) * (height - 2 * pad);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("stroke", s.color);
    line.setAttribute("class", `series-${s.name}`);
    svg.appendChild(line);
  }
  const title = document.createElementNS(SVG, "title");
  title.textContent = `peak ${top.toFixed(1)}/s`;
  svg.appendChild(title);
  return svg;
}

function offenders(title, report) {
  const list = el("ol");
  for (const o of (report && report.keys) || []) {
    list.appendChild(el("li", {}, [
      document.createTextNode(o.key),
      el("span", { text: o.count.toFixed(1) }),
    ]));
  }
  const shown = list.firstChild ? list : el("p", { class: "muted none", text: "none" });
  return el("div", {}, [el("h3", { text: title }), shown]);
}

function count(label, cls, value) {
  return el("div", {}, [el("span", { text: label }), el("span", { class: cls, text: number(value) })]);
}

function rule(r) {
  const style = getComputedStyle(document.documentElement);
  const shadow = r.mode.startsWith("shadow");
  const last = (xs) => (xs.length ? xs[xs.length - 1] : 0);
  return el("article", { class: "rule", "data-rule": r.name }, [
    el("h2", {}, [
      document.createTextNode(r.name),
      el("span", { class: shadow ? "mode shadow" : "mode", text: r.mode }),
    ]),
    el("p", { class: "what", text: `${r.algorithm} · key ${r.key} · ${r.applies_to} · store down: ${r.on_store_failure}` }),
    el("div", { class: "counts" }, [
      count("allowed", "allowed", r.counts.allowed),
      count("rejected", "rejected", r.counts.rejected),
      count("shadow allowed", "shadow-allowed", r.counts.shadow_allowed),
      count("shadow rejected", "shadow-rejected", r.counts.shadow_rejected),
    ]),
    sparkline([
      { name: "allowed", color: style.getPropertyValue("--allowed").trim(), values: r.rates.allowed },
      { name: "rejected", color: style.getPropertyValue("--rejected").trim(), values: r.rates.rejected },
      { name: "shadow", color: style.getPropertyValue("--shadow").trim(), values: r.rates.shadow_rejected },
    ]),
    el("p", {
      class: "legend",
      text: `now: ${last(r.rates.allowed).toFixed(1)}/s allowed, ${last(r.rates.rejected).toFixed(1)}/s rejected, ${last(r.rates.shadow_allowed).toFixed(1)}/s shadow-allowed, ${last(r.rates.shadow_rejected).toFixed(1)}/s shadow-rejected`,
    }),
    el("div", { class: "tops" }, [
      offenders("top limited", r.top && r.top.limited),
      offenders("top would-have-been-limited", r.top && r.top.shadow),
    ]),
  ]);
}

function show(data) {
  document.getElementById("version").textContent = `version ${data.config_version}`;
  document.getElementById("every").textContent = data.sample_every_s;
  document.getElementById("in-flight").textContent = `${number(data.in_flight)} of ${number(data.max_in_flight)}`;
  document.getElementById("shed").textContent = Object.entries(data.shed)
    .map(([reason, n]) => `${number(n)} ${reason.replace("_", " ")}`)
    .join(", ");
  const s = data.store;
  const store = [s.kind];
  if (s.keys !== null) store.push(`${number(s.keys)} keys`);
  if (s.breaker !== null) store.push(`breaker ${s.breaker}`);
  if (s.late_timeouts !== null) store.push(`${number(s.late_timeouts)} late timeouts`);
  store.push(`${number(s.failures)} failures`);
  const storeNode = document.getElementById("store");
  storeNode.textContent = store.join(" · ");
  storeNode.className = s.breaker && s.breaker !== "closed" ? "bad" : "";

  const reload = data.last_reload;
  const reloadNode = document.getElementById("reload");
  const errors = document.getElementById("reload-errors");
  const list = document.getElementById("reload-error-list");
  list.replaceChildren();
  if (reload) {
    reloadNode.textContent = reload.ok
      ? `ok, ${reload.ago_s}s ago`
      : `refused, ${reload.ago_s}s ago`;
    reloadNode.className = reload.ok ? "" : "bad";
    for (const e of reload.errors) list.appendChild(el("li", { text: e }));
  }
  errors.hidden = !reload || reload.ok;

  document.getElementById("rules").replaceChildren(...data.rules.map(rule));
  document.getElementById("status").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
}

// The admin token, when the listener takes one: given once (typed in, or in the address's
// fragment, which the browser never sends) and kept for this tab only.
const TOKEN_KEY = "ratewarden-admin-token";

function takeTokenFromFragment() {
  const given = /^#token=(.+)$/.exec(location.hash);
  if (!given) return;
  try {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(given[1]));
  } catch (_) {
    // Not percent-encoded text: no token, and the page asks for one.
  }
  // Out of the address bar, so that it is not copied along with the link.
  history.replaceState(null, "", location.pathname + location.search);
}

function askForToken(refused) {
  const prompt = document.getElementById("token-prompt");
  prompt.hidden = false;
  document.getElementById("status").textContent = refused
    ? "the token was refused; give the admin token"
    : "this listener takes a token";
}

let timer = null;

async function poll() {
  clearTimeout(timer);
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  try {
    const response = await fetch("/v1/dashboard", { cache: "no-store", headers });
    if (response.status === 401) {
      // No polling until a token is given: each try would only be refused again.
      askForToken(token !== null);
      return;
    }
    if (!response.ok) throw new Error(`/v1/dashboard answered ${response.status}`);
    document.getElementById("token-prompt").hidden = true;
    show(await response.json());
  } catch (error) {
    // Not an error of the page: the server may be restarting. Say so and keep polling.
    document.getElementById("status").textContent = `cannot reach the server (${error.message}); retrying`;
  }
  timer = setTimeout(poll, POLL_MS);
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token-input");
  const token = input.value.trim();
  input.value = "";
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  poll();
});

takeTokenFromFragment();
poll();
