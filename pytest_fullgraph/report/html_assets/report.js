/* fullgraph-report.html: the checks table, its filters and live counts, built from the JSON the page embeds.
   Plain DOM and no library, so the page is one file that loads nothing from the network. */
"use strict";
(() => {
  const read = (id) => JSON.parse(document.getElementById(id).textContent);
  const checks = read("fullgraph-checks");
  const meta = read("fullgraph-meta");
  const NONE = "(none)";
  const rank = Object.fromEntries(meta.outcomes.map((name, index) => [name, index]));

  const element = (tag, text, className) => {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  };
  const link = (url, text) => {
    if (!url) return element("span", text);
    const anchor = element("a", text);
    anchor.href = url;
    return anchor;
  };
  const records = (check) => (check.breaks.length ? check.breaks : check.first_break ? [check.first_break] : []);
  const where = (record) => (record.file ? `${record.file}:${record.line}` : "<unknown location>");
  // the rule is the page's Python (source_roots): a path under a linked package, at the version that ran
  const sourceUrl = (record) => {
    const prefix = Object.keys(meta.roots).find((root) => record.file && record.file.startsWith(root));
    return prefix ? `${meta.roots[prefix]}${record.file}#L${record.line}` : "";
  };
  const headline = (check) => {
    const line = String(check.message || "").split("\n").map((text) => text.trim()).find((text) => text);
    return line || check.outcome;
  };
  const kind = (check) => (check.mismatch && check.mismatch.precision ? check.mismatch.precision.kind : "");
  // as results.check_seconds: the check's wall seconds, or in reports without them (before v7) its phases' sum
  const seconds = (check) => check.duration_s ?? Object.values(check.timings || {}).reduce((sum, t) => sum + t, 0);
  const checkId = (check) => `${check.model}-${check.scenario}-${check.level}-${check.dtype}`;

  /** The values a check has for each filter: one each, except origin (every origin of its breaks). */
  const facetValues = (check) => {
    const origins = [...new Set(records(check).map((record) => record.origin))];
    return {
      level: [check.level], scenario: [check.scenario], dtype: [check.dtype], outcome: [check.outcome],
      origin: origins.length ? origins : [NONE],
      change: meta.changes ? meta.changes[checkId(check)] || ["unchanged"] : [],
    };
  };

  const buildRow = (check) => {
    const tr = element("tr", undefined, "check");
    const values = facetValues(check);
    const first = check.first_break || records(check)[0];
    const outcome = element("span", check.outcome + (kind(check) ? ` (${kind(check)})` : ""),
      `badge o-${check.outcome}`);
    const cells = [element("td", check.model), element("td", check.dtype), element("td", check.level),
      element("td", check.scenario), element("td"), element("td", undefined, "headline"), element("td"),
      element("td", values.origin.join(", ")), element("td", `${seconds(check).toFixed(1)} s`, "n")];
    cells[4].append(outcome);
    cells[5].append(element("span", headline(check))); // its first lines: the style clamps the span
    cells[5].title = headline(check);
    if (first) cells[6].append(link(sourceUrl(first), where(first)));
    cells[6].className = "where";
    tr.append(...cells);
    return { tr, check, values, model: check.model.toLowerCase(), detail: null };
  };

  const breakItem = (record) => {
    const item = element("li");
    const gb = record.gb_id ? link(meta.help[record.gb_id], record.gb_id) : element("span", "no GB id");
    item.append(`${record.gb_type} [`, gb, "] at ", link(sourceUrl(record), where(record)),
      ` in ${record.function} (${record.origin})${record.hits > 1 ? `, met ${record.hits} times` : ""}`);
    if (record.source) item.append(element("pre", record.source));
    if (record.cause) {
      const inside = element("ul");
      inside.append(breakItem(record.cause));
      item.append("inside it:", inside);
    }
    return item;
  };

  const buildDetail = (row) => {
    const check = row.check;
    const tr = element("tr", undefined, "detail");
    const td = element("td");
    td.colSpan = 9;
    const facts = [checkId(check), check.stage && `stage: ${check.stage}`, check.device && `device ${check.device}`,
      `backend ${check.backend}`, `max_new_tokens ${check.max_new_tokens}`,
      check.graph_count !== null && `graphs: ${check.graph_count}`, `recompiles: ${check.recompiles}`,
      ...Object.entries(check.timings || {}).map(([name, value]) => `${name} ${value.toFixed(2)}`)];
    td.append(element("div", facts.filter((fact) => fact).join(" \u00b7 ")), element("pre", check.message || ""));
    if (records(check).length) {
      const list = element("ol");
      list.append(...records(check).map(breakItem));
      td.append(element("b", "Breaks"), list);
    }
    const raw = element("details");
    raw.append(element("summary", "the check's JSON"), element("pre", JSON.stringify(check, null, 1)));
    td.append(raw);
    tr.append(td);
    return tr;
  };

  // the table's headings stick just below the filter bar, whose height changes as its filters wrap
  const filters = document.getElementById("filters");
  const belowFilters = () => document.documentElement.style.setProperty("--filters-height",
    `${filters.getBoundingClientRect().height}px`);
  new ResizeObserver(belowFilters).observe(filters);
  belowFilters();

  const rows = checks.map(buildRow);
  const tbody = document.querySelector("#checks tbody");
  tbody.append(...rows.map((row) => row.tr));
  rows.forEach((row) => row.tr.addEventListener("click", (event) => {
    if (event.target.closest("a")) return; // a source link opens, the row stays as it is
    if (!row.detail) {
      row.detail = buildDetail(row);
      row.tr.after(row.detail);
    } else {
      row.detail.hidden = !row.detail.hidden;
    }
  }));

  const selects = Object.fromEntries(meta.facets.map((facet) => [facet.name,
    document.getElementById(`filter-${facet.name}`)]));
  const modelBox = document.getElementById("filter-model");

  /** Show the rows every filter lets through; the counts say how many, per outcome. */
  const apply = () => {
    const wanted = Object.entries(selects).filter(([, select]) => select.value);
    const needle = modelBox.value.trim().toLowerCase();
    const shown = {};
    let visible = 0;
    for (const row of rows) {
      const ok = (!needle || row.model.includes(needle))
        && wanted.every(([name, select]) => row.values[name].includes(select.value));
      row.tr.hidden = !ok;
      if (row.detail && !ok) row.detail.hidden = true;
      if (ok) {
        visible += 1;
        shown[row.check.outcome] = (shown[row.check.outcome] || 0) + 1;
      }
    }
    document.getElementById("visible").textContent = visible;
    const counts = document.getElementById("shown-counts");
    const names = Object.keys(shown).sort((a, b) => (rank[a] ?? 99) - (rank[b] ?? 99));
    counts.replaceChildren(...names.flatMap((name, index) => {
      const span = element("span", `${shown[name]} ${name}`);
      span.dataset.outcome = name;
      span.dataset.count = shown[name];
      return index ? [", ", span] : [span];
    }));
  };
  Object.values(selects).forEach((select) => select.addEventListener("change", apply));
  modelBox.addEventListener("input", apply);
  document.getElementById("filter-reset").addEventListener("click", () => {
    Object.values(selects).forEach((select) => { select.value = ""; });
    modelBox.value = "";
    apply();
  });

  // a cell of the counts table filters the checks to its level and outcome
  document.querySelectorAll("#counts td[data-outcome]").forEach((cell) => cell.addEventListener("click", () => {
    selects.level.value = cell.dataset.level || "";
    selects.outcome.value = cell.dataset.outcome;
    apply();
    document.getElementById("checks-section").scrollIntoView();
  }));

  // levels, scenarios and dtypes sort in the report's order (forward before generate), as the filters list them
  const position = Object.fromEntries(meta.facets.map((facet) => [facet.name,
    Object.fromEntries(facet.options.map(([value], index) => [value, index]))]));
  const ordinal = (name) => (row) => position[name][row.check[name]] ?? 999;
  const sortKeys = {
    model: (row) => row.check.model, dtype: ordinal("dtype"), level: ordinal("level"),
    scenario: ordinal("scenario"), outcome: (row) => rank[row.check.outcome] ?? 99,
    duration: (row) => seconds(row.check),
  };
  let sorted = { key: "", descending: false };
  document.querySelectorAll("#checks th[data-sort]").forEach((header) => header.addEventListener("click", () => {
    const key = header.dataset.sort;
    sorted = { key, descending: sorted.key === key && !sorted.descending };
    const value = sortKeys[key];
    const order = [...rows].sort((a, b) => {
      const [x, y] = [value(a), value(b)];
      const cmp = x < y ? -1 : x > y ? 1 : 0;
      return sorted.descending ? -cmp : cmp;
    });
    tbody.append(...order.flatMap((row) => (row.detail ? [row.tr, row.detail] : [row.tr])));
  }));

  document.getElementById("total").textContent = rows.length;
  apply();
  document.body.dataset.ready = "true";
})();
