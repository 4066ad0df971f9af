"use strict";
// The run page's script: tabs, the episode browser and checkpoint comparison over the data
// block. Everything from the data is shown as text (text nodes, attribute values), never
// parsed as markup: models and tasks wrote it.
(() => {
  const DATA = JSON.parse(document.getElementById("run-data").textContent);
  const PAGE_SIZE = 50;
  const COLUMN = Object.fromEntries(DATA.columns.map((name, index) => [name, index]));
  const field = (index, name) => DATA.episodes[index][COLUMN[name]];
  const byId = id => document.getElementById(id);

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (name === "onclick") node.addEventListener("click", value);
      else if (name === "onchange") node.addEventListener("change", value);
      else node.setAttribute(name, value);
    }
    node.append(...children.filter(child => child !== null && child !== undefined)
      .map(child => (child instanceof Node ? child : String(child))));
    return node;
  }

  const show = value => (value === null || value === undefined ? "-"
    : typeof value === "number" ? String(+value.toPrecision(4)) : String(value));

  // An opened row shows its episode in a row below it; opening it again closes it.
  function toggleDetail(row, columns, render) {
    const wasOpen = row.classList.contains("open");
    for (const detail of row.parentNode.querySelectorAll("tr.detail")) detail.remove();
    for (const open of row.parentNode.querySelectorAll("tr.open")) open.classList.remove("open");
    if (wasOpen) return;
    row.classList.add("open");
    row.after(el("tr", {class: "detail"}, el("td", {colspan: columns}, render())));
  }

  function pager(container, total, page, onPage) {
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    const button = (label, target, off) => el("button", {
      type: "button", class: `page-${label}`, onclick: () => onPage(target),
      ...(off ? {disabled: ""} : {})}, label);
    container.replaceChildren(button("previous", page - 1, page === 0),
      el("span", {}, `page ${page + 1} of ${pages} (${total})`),
      button("next", page + 1, page >= pages - 1));
  }

  // ---- tabs and the overview ----------------------------------------------------------
  function showTab(name) {
    for (const button of document.querySelectorAll("nav button")) {
      button.classList.toggle("active", button.dataset.tab === name);
    }
    for (const section of document.querySelectorAll("body > section")) {
      section.hidden = section.id !== name;
    }
  }
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => showTab(button.dataset.tab));
  }
  byId("run-name").textContent = DATA.run;
  byId("run-folder").textContent = `${DATA.folder} · page written ${DATA.written}`;
  byId("end-lines").textContent = DATA.end_lines.join("\n");
  byId("wall-time").textContent = DATA.wall_time;
  byId("config-text").textContent = DATA.config || "(no config.yaml in the run folder)";

  // ---- one episode ----------------------------------------------------------------------
  const FACTS = [["sample", "sample_id"], ["split", "source"], ["step", "step"],
    ["group", "group_index"], ["category", "category"], ["status", "status"],
    ["outcome", "outcome"], ["reward", "reward"], ["turns", "turns"],
    ["prompt tokens", "prompt_tokens"], ["completion tokens", "completion_tokens"],
    ["policy version", "policy_version"]];
  const SPEAKERS = {task: "task (user)", environment: "environment (user)",
    agent: "agent (assistant)"};

  function renderChat(index) {
    return el("div", {class: "chat"}, ...field(index, "chat").map(([role, text], position) => {
      // the task's first message poses the problem; its later ones answer the agent
      const kind = role === "agent" ? "agent" : position === 0 ? "task" : "environment";
      return el("div", {class: `message ${kind}`}, el("div", {class: "role"}, SPEAKERS[kind]),
        el("pre", {}, DATA.strings[text]));
    }));
  }

  // the info entry of reward functions' texts (a judge's prompt and verdict: TEXTS_KEY of
  // src/tasks/rubric.py), each text shown whole rather than as a cell of the info table
  const TEXTS = "reward_function_texts";

  // a mapping column (metrics, info) as an open table of its entries but `leftOut`; null
  // when empty
  function renderEntries(index, name, leftOut) {
    const entries = Object.entries(field(index, name) || {}).filter(([key]) => key !== leftOut);
    const rows = entries.map(([key, value]) => el("tr", {},
      el("td", {}, key),
      el("td", {}, typeof value === "object" && value !== null ? JSON.stringify(value)
        : show(value))));
    return rows.length ? el("details", {open: ""}, el("summary", {}, name),
      el("table", {class: name}, el("tbody", {}, ...rows))) : null;
  }

  // each reward function's texts, by function then by name; null when there are none
  function renderTexts(index) {
    const byFunction = Object.entries((field(index, "info") || {})[TEXTS] || {});
    const texts = byFunction.flatMap(([name, own]) => Object.entries(own || {}).map(
      ([key, text]) => el("div", {class: "reward-text"},
        el("div", {class: "role"}, `${name} · ${key}`), el("pre", {}, show(text)))));
    return texts.length ? el("details", {open: ""}, el("summary", {}, "reward function texts"),
      ...texts) : null;
  }

  function renderEpisode(index, title) {
    const error = field(index, "error");
    return el("div", {class: "episode panel", "data-episode": index},
      title ? el("h2", {}, title) : null,
      el("div", {class: "facts"}, ...FACTS.map(([label, name]) => el("span", {},
        el("b", {}, `${label}: `), el("span", {class: name === "outcome"
          ? `outcome-${field(index, name)}` : ""}, show(field(index, name)))))),
      renderChat(index),
      error ? el("details", {open: ""}, el("summary", {}, "error"), el("pre", {}, error))
        : null,
      renderEntries(index, "metrics"),
      renderTexts(index),
      renderEntries(index, "info", TEXTS));
  }

  // ---- the episode browser ----------------------------------------------------------
  const FILTERS = [["source", "split"], ["step", "step"], ["category", "category"],
    ["outcome", "outcome"], ["status", "status"]];
  const chosen = {search: ""};
  let listed = [];
  let episodePage = 0;

  function distinct(name) {
    const values = [...new Set(DATA.episodes.map(row => row[COLUMN[name]]))];
    return values.sort((a, b) => (typeof a === "number" && typeof b === "number" ? a - b
      : String(a).localeCompare(String(b))));
  }

  function matches(index) {
    for (const [name] of FILTERS) {
      if (chosen[name] && String(field(index, name)) !== chosen[name]) return false;
    }
    return !chosen.search || field(index, "sample_id").includes(chosen.search);
  }

  function applyFilters() {
    listed = [];
    for (let index = 0; index < DATA.episodes.length; index++) {
      if (matches(index)) listed.push(index);
    }
    episodePage = 0;
    renderEpisodeList();
  }

  function renderEpisodeList() {
    byId("episode-count").textContent =
      `${listed.length} of ${DATA.episodes.length} episodes match the filters`;
    pager(byId("episode-pager"), listed.length, episodePage, page => {
      episodePage = page;
      renderEpisodeList();
    });
    const start = episodePage * PAGE_SIZE;
    byId("episode-table").tBodies[0].replaceChildren(...listed.slice(start, start + PAGE_SIZE)
      .map(index => {
        const row = el("tr", {class: "pick", "data-episode": index},
          ...["sample_id", "source", "step", "group_index", "category"].map(name =>
            el("td", {}, show(field(index, name)))),
          el("td", {class: `outcome-${field(index, "outcome")}`}, field(index, "outcome")),
          el("td", {}, field(index, "status")),
          ...["reward", "turns"].map(name => el("td", {class: "number"},
            show(field(index, name)))),
          el("td", {class: "number"},
            `${field(index, "prompt_tokens")} / ${field(index, "completion_tokens")}`));
        row.addEventListener("click", () => toggleDetail(row, 10, () => renderEpisode(index)));
        return row;
      }));
  }

  const filters = byId("episode-filters");
  for (const [name, label] of FILTERS) {
    const select = el("select", {id: `filter-${name}`, onchange: event => {
      chosen[name] = event.target.value;
      applyFilters();
    }}, el("option", {value: ""}, "all"),
    ...distinct(name).map(value => el("option", {value: String(value)}, show(value))));
    filters.append(el("label", {}, label, select));
  }
  const search = el("input", {id: "filter-sample", type: "search", placeholder: "sample id"});
  search.addEventListener("input", () => {
    chosen.search = search.value;
    applyFilters();
  });
  filters.append(el("label", {}, "sample id contains", search));
  byId("episode-notes").textContent = DATA.notes.join("; ");
  applyFilters();

  // ---- checkpoint comparison --------------------------------------------------------
  const compared = {split: Object.keys(DATA.comparisons)[0], before: null, after: null,
    filter: "all", page: 0, rows: []};
  const label = evaluation => DATA.evaluations[evaluation].label;
  const CHANGES = {all: "all", up: "went up", down: "went down", same: "same"};
  const correct = index => (field(index, "outcome") === "correct" ? 1 : 0);

  function problemRows(before, after) {
    const afterBySample = new Map(DATA.evaluations[after].episodes.map(index =>
      [field(index, "sample_id"), index]));
    return DATA.evaluations[before].episodes.filter(index =>
      afterBySample.has(field(index, "sample_id"))).map(index => {
      const other = afterBySample.get(field(index, "sample_id"));
      const change = correct(other) - correct(index);
      return {before: index, after: other, change: change > 0 ? "up" : change < 0 ? "down"
        : "same"};
    });
  }

  // `level`: the unit of each side's mean, `change`: of their difference
  function describe(name, summary, level, change) {
    if (!summary) return `${name}: fewer than 2 samples have it on both sides`;
    return `${name}: before ${show(summary.before)}${level}, after ${show(summary.after)}`
      + `${level}; difference (after - before) ${summary.difference}${change} (95% paired `
      + `bootstrap, ${summary.pairs} pairs); up ${summary.up}, down ${summary.down}, `
      + `same ${summary.same}`;
  }

  function renderProblems() {
    const rows = compared.rows.filter(row => compared.filter === "all"
      || row.change === compared.filter);
    pager(byId("compare-pager"), rows.length, compared.page, page => {
      compared.page = page;
      renderProblems();
    });
    const start = compared.page * PAGE_SIZE;
    const cell = index => el("td", {class: `outcome-${field(index, "outcome")}`},
      `${field(index, "outcome")} (reward ${show(field(index, "reward"))})`);
    byId("compare-problems").tBodies[0].replaceChildren(...rows.slice(start, start + PAGE_SIZE)
      .map(row => {
        const line = el("tr", {class: "pick", "data-change": row.change},
          el("td", {}, field(row.before, "sample_id")), el("td", {}, field(row.before, "category")),
          cell(row.before), cell(row.after), el("td", {class: row.change}, row.change));
        line.addEventListener("click", () => toggleDetail(line, 5, () => el("div",
          {class: "side-by-side"},
          renderEpisode(row.before, `before: ${label(compared.before)}`),
          renderEpisode(row.after, `after: ${label(compared.after)}`))));
        return line;
      }));
  }

  function renderComparison() {
    const pair = DATA.comparisons[compared.split].pairs[`${compared.before}-${compared.after}`];
    byId("compare-summary").replaceChildren(
      el("div", {}, `before: ${label(compared.before)} · after: ${label(compared.after)}`),
      el("div", {}, `${pair.samples} samples in both`
        + (pair.only_one_side ? ` (${pair.only_one_side} in one only, left out)` : "")),
      el("div", {id: "compare-success"}, describe("success", pair.success, "%", " points")),
      el("div", {}, describe("reward", pair.reward, "", "")));
    byId("compare-categories").tBodies[0].replaceChildren(...pair.categories.map(row =>
      el("tr", {}, el("td", {}, row.category), el("td", {class: "number"}, row.samples),
        el("td", {}, row.before), el("td", {}, row.after), el("td", {}, show(row.difference)),
        el("td", {class: "number up"}, show(row.up)),
        el("td", {class: "number down"}, show(row.down)))));
    compared.rows = problemRows(compared.before, compared.after);
    const count = change => compared.rows.filter(row => change === "all"
      || row.change === change).length;
    byId("compare-filter").replaceChildren(...Object.keys(CHANGES).map(change =>
      el("button", {type: "button", id: `compare-${change}`, "data-count": count(change),
        class: change === compared.filter ? "active" : "", onclick: () => {
          compared.filter = change;
          compared.page = 0;
          renderComparison();
        }}, `${CHANGES[change]} (${count(change)})`)));
    renderProblems();
  }

  function renderChoice() {
    const choice = byId("compare-choice");
    if (!compared.split) {
      choice.replaceChildren(el("p", {}, "No split was evaluated twice: nothing to compare "
        + "(evaluation.every_n_batches / at_start / at_end, or --against OTHER_DIR)."));
      return;
    }
    const {members} = DATA.comparisons[compared.split];
    const position = members.indexOf(compared.before);
    if (position < 0 || position === members.length - 1) compared.before = members[0];
    const later = members.slice(members.indexOf(compared.before) + 1);
    if (!later.includes(compared.after)) compared.after = later[later.length - 1];
    const select = (id, text, options, value, name, set) => el("label", {}, text,
      el("select", {id, onchange: event => {
        set(event.target.value);
        compared.page = 0;
        renderChoice();
      }}, ...options.map(option => {
        const node = el("option", {value: String(option)}, name(option));
        node.selected = option === value;
        return node;
      })));
    choice.replaceChildren(
      select("compare-split", "split", Object.keys(DATA.comparisons), compared.split,
        split => split, value => { compared.split = value; }),
      select("compare-before", "before", members.slice(0, -1), compared.before, label,
        value => { compared.before = Number(value); }),
      select("compare-after", "after", later, compared.after, label,
        value => { compared.after = Number(value); }));
    renderComparison();
  }
  renderChoice();
})();
