// The page of nmt-serve: translates the typed sentences with the native API (POST v1/translate) and draws the
// encoder-decoder attention of a chosen translation as heatmaps by layer and head, as in Figures 3-5 of
// "Attention Is All You Need". Plain DOM, no library. URLs are relative to the page ({url-root}/), and text
// from the model or the server is only ever set with textContent.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const AVERAGE = "avg";  // the head selector's value for the mean of the layer's heads
  const THUMBNAIL_PX = 96;  // the longer side of a head's thumbnail

  let translations = [];  // the last answer's translations
  let shown = null;  // the attention being drawn: {layers, heads, source_tokens, target_tokens, weights}
  let busy = false;
  let answered = 0;  // requests sent and ended, shown as <body data-answered> for tests to wait on

  // An element with its text, data- attributes and other properties: el("td", {className: "weight", data: {weight:
  // "0.5"}}, [children]).
  function el(tag, {text, data, ...properties} = {}, children = []) {
    const node = Object.assign(document.createElement(tag), properties);
    if (text !== undefined) node.textContent = text;
    for (const [key, value] of Object.entries(data || {})) node.dataset[key] = value;
    for (const child of children) node.append(child);
    return node;
  }

  // The JSON answer of a GET (no body) or POST; a failure throws an Error carrying the server's "error" text.
  async function api(path, body) {
    const init = body === undefined ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    };
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new Error(`cannot reach the server: ${e.message}`);
    }
    let answer = null;
    try {
      answer = await response.json();
    } catch (e) {
      // not JSON: the status line says what happened
    }
    if (!response.ok) {
      const message = answer && typeof answer.error === "string" ? answer.error : response.statusText;
      throw Object.assign(new Error(message || `HTTP ${response.status}`), {status: response.status});
    }
    return answer;
  }

  function showError(error) {
    const box = $("error");
    box.textContent = error.message;
    box.dataset.status = error.status || "";
    box.hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error").textContent = "";
  }

  function setBusy(on) {
    busy = on;
    $("busy").hidden = !on;
    $("translate").disabled = on;
    document.body.dataset.busy = String(on);
  }

  async function loadModel() {
    try {
      const [model] = await api("models");
      $("model").dataset.sourceLang = model.source_lang;
      $("model").dataset.targetLang = model.target_lang;
      $("model-langs").textContent = `${model.source_lang} \u2192 ${model.target_lang}`;
      if (model.parameters) $("model-params").textContent = `${(model.parameters / 1e6).toFixed(1)}M parameters`;
      const search = model.default_search || {};
      if (search.beam) $("beam").value = search.beam;
      if (search.nbest) $("nbest").value = search.nbest;
      if (model.card) {
        $("model-card").textContent = model.card;
        $("model-card-box").hidden = false;
      }
    } catch (e) {
      $("model-langs").textContent = "model unknown";
      showError(e);
    }
  }

  // A positive integer from a number input, or undefined (JSON.stringify leaves it out: the server's default).
  function count(input) {
    const value = Number(input.value);
    return Number.isInteger(value) && value >= 1 ? value : undefined;
  }

  // The terms field as the native API takes it: "source = target" lines make a glossary (the target term is forced
  // where the source term occurs), other lines are target terms forced in every sentence.
  function terms(sentences) {
    const glossary = {};
    const everywhere = [];
    for (const line of $("terms").value.split("\n").map((l) => l.trim()).filter((l) => l)) {
      const at = line.indexOf("=");
      if (at > 0) glossary[line.slice(0, at).trim()] = line.slice(at + 1).trim();
      else everywhere.push(line);
    }
    return {
      glossary: Object.keys(glossary).length ? glossary : undefined,
      constraints: everywhere.length ? sentences.map(() => everywhere) : undefined,
    };
  }

  async function translate() {
    if (busy) return;
    const text = $("source").value.split("\n").map((line) => line.trim()).filter((line) => line);
    if (!text.length) {
      showError(new Error("Type a sentence to translate (one per line)."));
      return;
    }
    clearError();
    setBusy(true);
    try {
      const answer = await api("v1/translate", {
        text, beam: count($("beam")), nbest: count($("nbest")), attention: true, ...terms(text),
      });
      showTranslations(answer.translations);
    } catch (e) {
      showError(e);
    } finally {
      setBusy(false);
      document.body.dataset.answered = String(++answered);
    }
  }

  function hypothesisLine(hypothesis) {
    return [
      el("span", {className: "text", text: hypothesis.text}),
      el("span", {className: "score", text: hypothesis.score.toFixed(3),
        title: "score: log-probability / length^lenpen"}),
    ];
  }

  function showTranslations(found) {
    translations = found;
    $("attention").hidden = true;
    const list = $("translations");
    list.replaceChildren();
    found.forEach((translation, index) => {
      const [best, ...others] = translation.hypotheses;
      const item = el("li", {className: "translation", data: {index: String(index)}}, [
        el("div", {className: "source", text: translation.source}),
      ]);
      if (best) {
        const button = el("button", {type: "button", className: "hypothesis best",
          title: "Show the attention of this translation"}, hypothesisLine(best));
        button.addEventListener("click", () => showAttention(index));
        item.append(button);
      }
      if (translation.constraints) {
        const unmet = translation.unmet_constraints || [];
        item.append(el("div", {className: "terms muted", text: `terms: ${translation.constraints.join(", ")}`}));
        if (unmet.length) {
          item.append(el("div", {className: "unmet", text: `not met: ${unmet.join(", ")}`,
            title: "The translation lacks these terms: they did not fit its length limit"}));
        }
      }
      if (others.length) {
        item.append(el("ol", {className: "alternatives"}, others.map((h, rank) =>
          el("li", {className: "hypothesis alternative", data: {rank: String(rank + 2)}}, hypothesisLine(h)))));
      }
      list.append(item);
    });
    $("results").hidden = false;
  }

  function showAttention(index) {
    const attention = translations[index].attention;
    for (const item of $("translations").children) {
      item.classList.toggle("selected", item.dataset.index === String(index));
    }
    if (!attention) {
      showError(new Error("The server sent no attention for this translation."));
      return;
    }
    shown = attention;
    $("attention-sentence").textContent = translations[index].hypotheses[0].text;
    $("layer").replaceChildren(...Array.from({length: attention.layers}, (_, l) =>
      el("option", {text: `${l + 1} of ${attention.layers}`, value: String(l)})));
    $("layer").value = String(attention.layers - 1);  // the last layer, as the paper's figures
    $("head").replaceChildren(
      el("option", {text: "average of heads", value: AVERAGE}),
      ...Array.from({length: attention.heads}, (_, h) =>
        el("option", {text: `${h + 1} of ${attention.heads}`, value: String(h)})));
    $("head").value = AVERAGE;
    $("attention").hidden = false;
    draw();
    $("attention").scrollIntoView({block: "nearest"});
  }

  // [target][source] weights of one head, or the mean of the layer's heads.
  function matrix(layer, head) {
    const heads = shown.weights[layer];
    if (head !== AVERAGE) return heads[Number(head)];
    return heads[0].map((row, t) => row.map((_, s) => heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
  }

  // White for 0, dark blue for 1: the weight is the lightness, so the map reads like the paper's gray ones.
  function color(weight) {
    return `hsl(215, 70%, ${(100 - 68 * Math.min(Math.max(weight, 0), 1)).toFixed(1)}%)`;
  }

  function draw() {
    const layer = Number($("layer").value);
    const head = $("head").value;
    drawTable(layer, head);
    drawThumbnails(layer, head);
  }

  // The heatmap as a table: a header row of source tokens (columns), a row per target token.
  function drawTable(layer, head) {
    const weights = matrix(layer, head);
    const {source_tokens: source, target_tokens: target} = shown;
    const which = head === AVERAGE ? `the average of ${shown.heads} heads` : `head ${Number(head) + 1}`;
    const header = el("tr", {}, [el("th", {className: "corner", text: "target \\ source"}),
      ...source.map((token) => el("th", {className: "source-token", scope: "col"}, [el("span", {text: token})]))]);
    const rows = target.map((token, t) => el("tr", {className: "target-row", data: {token}}, [
      el("th", {className: "target-token", scope: "row", text: token}),
      ...source.map((from, s) => {
        const w = weights[t][s];
        const cell = el("td", {className: "weight", title: `${from} \u2192 ${token}: ${w.toFixed(4)}`,
          data: {weight: w.toFixed(4)}}, [el("span", {className: "value", text: w.toFixed(2)})]);
        cell.style.backgroundColor = color(w);
        return cell;
      }),
    ]));
    const table = el("table", {data: {layer: String(layer), head}}, [
      el("caption", {text: `Layer ${layer + 1}, ${which}: one row per target token, one column per source token`}),
      el("thead", {}, [header]), el("tbody", {}, rows),
    ]);
    $("heatmap").replaceChildren(table);
  }

  // Every head of the layer (and their average) as a small picture; clicking one draws it as the table.
  function drawThumbnails(layer, selected) {
    const heads = [AVERAGE, ...Array.from({length: shown.heads}, (_, h) => String(h))];
    $("heads").replaceChildren(...heads.map((head) => {
      const button = el("button", {type: "button", className: "thumbnail", data: {head}}, [
        thumbnail(matrix(layer, head)),
        el("span", {text: head === AVERAGE ? "average" : `head ${Number(head) + 1}`}),
      ]);
      button.setAttribute("aria-pressed", String(head === selected));
      button.addEventListener("click", () => {
        $("head").value = head;
        draw();
      });
      return button;
    }));
  }

  function thumbnail(weights) {
    const rows = weights.length;
    const cols = weights[0].length;
    const cell = Math.max(1, Math.floor(THUMBNAIL_PX / Math.max(rows, cols)));
    const canvas = el("canvas");
    canvas.width = cols * cell;
    canvas.height = rows * cell;
    const context = canvas.getContext("2d");
    weights.forEach((row, t) => row.forEach((w, s) => {
      context.fillStyle = color(w);
      context.fillRect(s * cell, t * cell, cell, cell);
    }));
    return canvas;
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("translate-form").addEventListener("submit", (event) => {
      event.preventDefault();
      translate();
    });
    $("source").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        translate();
      }
    });
    $("layer").addEventListener("change", draw);
    $("head").addEventListener("change", draw);
    setBusy(false);
    document.body.dataset.answered = "0";
    loadModel();
  });
})();
