// The search page: vanilla JS, no build step, nothing from outside this server.
// Every data call carries the token as `Authorization: Bearer`; the token stays in this tab's
// sessionStorage and never goes into a URL. Server text is always set as textContent.
"use strict";

const TOKEN_KEY = "ragindex.token";
const LEG_STAGES = ["embed", "dense", "rocchio", "lexical"]; // overlapped in a hybrid search
const LEGS_WALL = "legs_wall";

const $ = (id) => document.getElementById(id);
const ms = (value) => `${value.toFixed(value < 1 ? 2 : 1)} ms`;

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else node[key] = value;
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// One call to the API, relative to this page (so it works behind a path prefix too). An error
// answer becomes an ApiError carrying the server's own `detail` (problem+json or {"detail"}).
async function api(method, path, body) {
  const headers = { Accept: "application/json, application/problem+json" };
  if (token()) headers.Authorization = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(new URL(path, document.baseURI), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (err) {
    throw new ApiError(0, "the server cannot be reached: " + err.message);
  }
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json().catch(() => null) : null;
  if (!response.ok) throw new ApiError(response.status, problemText(response, data));
  return data;
}

function problemText(response, data) {
  let detail = data && data.detail !== undefined ? data.detail : response.statusText;
  if (Array.isArray(detail)) detail = detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
  const title = (data && data.title) || response.statusText || "error";
  let text = `${response.status} ${title}: ${detail}`;
  const retry = response.headers.get("Retry-After");
  if (response.status === 429 && retry) text += ` (retry after ${retry} s)`;
  return text;
}

function showError(err) {
  const box = $("error");
  box.textContent = err instanceof ApiError ? err.message : "error: " + err;
  box.dataset.status = err instanceof ApiError ? String(err.status) : "";
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

// Disables the buttons while a call is out; marks the body busy for whoever waits on the page.
async function busy(work) {
  clearError();
  const buttons = document.querySelectorAll("button");
  buttons.forEach((b) => (b.disabled = true));
  document.body.dataset.busy = "true";
  try {
    await work();
  } catch (err) {
    showError(err);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
    delete document.body.dataset.busy;
  }
}

// ------------------------------------------------------------------ log in

async function logIn() {
  const stats = await api("GET", "v1/stats");
  $("who").textContent =
    `tenant ${stats.tenant}: ${stats.documents} documents, ${stats.chunks} chunks`;
  document.body.dataset.tenant = stats.tenant;
}

function onLogin(event) {
  event.preventDefault();
  const value = $("token").value.trim();
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
  busy(async () => {
    try {
      await logIn();
    } catch (err) {
      if (err.status === 401) logOut();
      throw err;
    }
  });
}

function logOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  $("token").value = "";
  $("who").textContent = "not logged in";
  delete document.body.dataset.tenant;
}

// ------------------------------------------------------------------ search and answer

// The read scope both calls share; a filter that is not JSON is refused here, any other
// mistake in it by the server (whose detail is shown).
function readScope() {
  const scope = {};
  const k = $("k").value.trim();
  if (k) scope.k = Number(k);
  const text = $("filter").value.trim();
  if (text) {
    try {
      scope.filter = JSON.parse(text);
    } catch (err) {
      throw new ApiError(0, "the filter is not JSON: " + err.message);
    }
  }
  return scope;
}

function onSearch(event) {
  event.preventDefault();
  busy(async () => {
    const body = { query: $("query").value, mode: $("mode").value, ...readScope() };
    const result = await api("POST", "v1/search", body);
    renderHits(result.hits);
    renderTimings(result.timings_ms);
    renderWarnings(result.warnings);
  });
}

function onAnswer() {
  busy(async () => {
    const body = { question: $("query").value, ...readScope() };
    renderAnswer(await api("POST", "v1/answer", body));
  });
}

function renderHits(hits) {
  const list = $("hits");
  list.replaceChildren();
  $("hits-heading").hidden = false;
  $("hits-heading").textContent = hits.length ? `Hits (${hits.length})` : "No hits";
  hits.forEach((hit, i) => {
    const ranks = Object.entries(hit.ranks)
      .map(([leg, rank]) => `${leg} #${rank}`)
      .join(" · ");
    list.append(
      el(
        "li",
        { className: "hit", dataset: { chunkId: hit.chunk_id } },
        el(
          "div",
          { className: "hit-head" },
          el("span", { className: "rank" }, `${i + 1}`),
          el("strong", { className: "title" }, hit.title || "(untitled)"),
          el("span", { className: "source" }, `${hit.source}/${hit.doc_id}`),
          el("code", { className: "chunk-id" }, hit.chunk_id),
          el("span", { className: "score", title: "fused score" }, hit.score.toFixed(4)),
          el("span", { className: "ranks", title: "rank in each leg" }, ranks),
        ),
        el("p", { className: "text" }, hit.text),
      ),
    );
  });
}

function hitFor(chunkId) {
  return [...document.querySelectorAll("#hits .hit")].find((h) => h.dataset.chunkId === chunkId);
}

function renderAnswer(answer) {
  $("answer-panel").hidden = false;
  $("answer").textContent = answer.refused
    ? `Refused: ${answer.refusal_reason || "no grounded answer"}`
    : answer.answer;
  $("answer").classList.toggle("refused", answer.refused);
  const cites = $("citations");
  cites.replaceChildren();
  if (answer.citations.length) cites.append("Cited: ");
  answer.citations.forEach((chunkId, i) => {
    if (i) cites.append(" ");
    const hit = hitFor(chunkId);
    if (!hit) {
      cites.append(el("code", { className: "citation", title: "not among the hits" }, chunkId));
      return;
    }
    const link = el("a", { className: "citation", href: "#", dataset: { chunkId } }, chunkId);
    link.addEventListener("click", (event) => {
      event.preventDefault();
      document.querySelectorAll(".hit.cited").forEach((h) => h.classList.remove("cited"));
      hit.classList.add("cited");
      hit.scrollIntoView({ block: "nearest" });
    });
    cites.append(link);
  });
  const sources = $("sources");
  sources.replaceChildren();
  for (const source of answer.sources) {
    sources.append(
      el(
        "li",
        { value: source.id },
        el("strong", {}, source.title || "(untitled)"),
        ` ${source.source}/${source.doc_id} `,
        el("code", {}, source.chunk_ids.join(" ")),
      ),
    );
  }
  renderWarnings(answer.warnings);
}

function renderWarnings(warnings) {
  $("warnings").hidden = !warnings.length;
  $("warnings").textContent = warnings.join(" · ");
}

// The search's stages as one horizontal stacked bar, a segment per stage, each as wide as its
// share of the stages' summed time. `legs_wall` is no stage: it is the wall time of the legs
// that ran side by side, said in the total.
function renderTimings(timings) {
  const stages = Object.entries(timings).filter(([stage]) => stage !== LEGS_WALL);
  const sum = stages.reduce((total, [, ms]) => total + ms, 0) || 1;
  const bar = $("timings");
  const legend = $("timings-legend");
  bar.replaceChildren();
  legend.replaceChildren();
  stages.forEach(([stage, took], i) => {
    const segment = el("div", {
      className: `segment c${i % 8}`,
      title: `${stage}: ${ms(took)}`,
      dataset: { stage, ms: String(took) },
    });
    segment.style.width = `${(100 * took) / sum}%`; // CSSOM, which the page's CSP allows
    bar.append(segment);
    const swatch = el("span", { className: `swatch c${i % 8}` });
    legend.append(el("li", {}, swatch, `${stage} ${ms(took)}`));
  });
  let total = ms(sum);
  if (LEGS_WALL in timings) {
    const others = stages.filter(([s]) => !LEG_STAGES.includes(s));
    const engine = timings[LEGS_WALL] + others.reduce((t, [, took]) => t + took, 0);
    total = `${ms(engine)} (the legs side by side: ${ms(timings[LEGS_WALL])})`;
  }
  $("timings-total").textContent = total;
  $("timings-panel").hidden = false;
}

// ------------------------------------------------------------------ wiring

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", logOut);
  $("search").addEventListener("submit", onSearch);
  $("answer-button").addEventListener("click", onAnswer);
  if (token()) {
    $("token").value = token();
    busy(logIn);
  }
});
