// How it learned: one probe sentence read by every snapshot of a training run. Every snapshot's data arrives once;
// the slider, Play, and the kind, layer and head choices draw here and send nothing to the server. The view goes
// into the address bar (epoch, kind, layer, head), so a copied link opens it.

const epochHeld = new Map(); // component key -> the visitor's view across redraws of the same timeline, any probe
const epochTimers = new Map(); // component key -> Play's interval
const epochSteppers = new Map(); // component key -> {root, go}

stepWithArrowKeys(epochSteppers);

const KIND_NAMES = { cross: "encoder-decoder attention", decoder: "masked decoder self-attention",
  encoder: "encoder self-attention" };

function writeViewToAddress(data, state) {
  const url = new URL(window.location.href);
  url.searchParams.set("epoch", String(data.epochs[state.at]));
  url.searchParams.set("kind", state.kind);
  url.searchParams.set("layer", String(state.layer + 1));
  url.searchParams.set("head", typeof state.head === "number" ? String(state.head + 1) : state.head);
  if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url);
}

function choice(label, options, value, onChange) {
  const wrap = element("label", "choice", `${label} `);
  const select = element("select");
  options.forEach(([optionValue, text]) => {
    const option = element("option", "", text);
    option.value = String(optionValue);
    select.append(option);
  });
  select.value = String(value);
  select.onchange = () => onChange(select.value);
  wrap.append(select);
  return wrap;
}

// A small line over the snapshots with the one shown marked: values may hold nulls (not measured).
function sparkline(values, now, high, title) {
  const width = 72, height = 26, pad = 3;
  const x = (i) => pad + (values.length > 1 ? (i * (width - 2 * pad)) / (values.length - 1) : (width - 2 * pad) / 2);
  const y = (v) => height - pad - (Math.min(v, high) / (high || 1)) * (height - 2 * pad);
  const line = svg("svg", { width, height, class: "spark", role: "img", "aria-label": title });
  line.append(svg("title", {}, title));
  const points = values.map((v, i) => (v === null ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`)).filter(Boolean);
  line.append(svg("polyline", { points: points.join(" "), class: "spark-line" }));
  if (values[now] !== null) line.append(svg("circle", { cx: x(now), cy: y(values[now]), r: 3.5, class: "spark-now" }));
  return line;
}

// A curve over x with a vertical mark at `at`: the validation BLEU by epoch, the training loss by step.
function drawCurve(box, title, xs, ys, at, xLabel) {
  box.replaceChildren(element("div", "map-title", title));
  const width = 320, height = 130, left = 34, bottom = 20, top = 8, right = 8;
  const shown = ys.map((y, i) => [xs[i], y]).filter(([, y]) => y !== null);
  if (!shown.length) {
    box.append(element("p", "note", "not recorded"));
    return;
  }
  const xMin = Math.min(...xs), xMax = Math.max(...xs, xMin + 1);
  const yMax = Math.max(...shown.map(([, y]) => y), 1e-9), yMin = Math.min(0, ...shown.map(([, y]) => y));
  const px = (x) => left + ((x - xMin) / (xMax - xMin)) * (width - left - right);
  const py = (y) => top + (1 - (y - yMin) / (yMax - yMin)) * (height - top - bottom);
  const chart = svg("svg", { width, height, class: "curve", role: "img", "aria-label": title });
  chart.append(svg("line", { x1: left, x2: left, y1: top, y2: height - bottom, class: "axis" }));
  chart.append(svg("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, class: "axis" }));
  chart.append(svg("text", { x: left - 4, y: top + 8, class: "tick end" }, yMax.toFixed(yMax < 10 ? 2 : 0)));
  chart.append(svg("text", { x: left - 4, y: height - bottom, class: "tick end" }, yMin.toFixed(0)));
  chart.append(svg("text", { x: width - right, y: height - 4, class: "tick end" }, xLabel));
  chart.append(svg("polyline", { points: shown.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" "),
    class: "curve-line" }));
  if (shown.length < 40) shown.forEach(([x, y]) => chart.append(svg("circle", { cx: px(x), cy: py(y), r: 3, class: "curve-point" })));
  chart.append(svg("line", { x1: px(at), x2: px(at), y1: top, y2: height - bottom, class: "curve-now" }));
  box.append(chart);
}

// The boxes a timeline's view draws into, laid out under the step controls, with a mark per snapshot.
function epochLayout(data, stepper) {
  const boxes = elements({ marks: "div epoch-marks", caption: "p caption", outputs: "div outputs", probs: "div map",
    view: "div view-choice", map: "div map epoch-map", heads: "div heads", lens: "div map", curves: "div curves",
    bleu: "div curve-box", loss: "div curve-box", body: "div epoch-body", left: "div epoch-left",
    right: "div epoch-right" });
  data.labels.forEach((label, i) => {
    const mark = button(label);
    mark.className = "epoch-mark";
    mark.onclick = () => stepper.go(i);
    boxes.marks.append(mark);
  });
  boxes.curves.append(boxes.bleu, boxes.loss);
  boxes.left.append(boxes.view, boxes.map, boxes.outputs, boxes.probs); // the map right below the controls: both on one projector screen
  boxes.right.append(boxes.heads, boxes.curves);
  boxes.body.append(boxes.left, boxes.right);
  const root = element("div", data.presentation ? "player epochs presentation" : "player epochs");
  root.append(stepper.controls, stepper.slider, boxes.marks, boxes.caption, boxes.body, boxes.lens);
  return { root, boxes };
}

function axes(data, kind) {
  if (kind === "encoder") return [data.src, data.src];
  if (kind === "decoder") return [data.tgt, data.decoder_input];
  return [data.tgt, data.src];
}

function drawViewChoice({ data, state, boxes, redraw }) {
  const layers = data.layers[state.kind];
  state.layer = Math.min(state.layer, layers - 1);
  boxes.view.replaceChildren(
    choice("Attention", Object.entries(KIND_NAMES).map(([k, name]) => [k, name]), state.kind, (value) => {
      state.kind = value;
      redraw();
    }),
    choice("Layer", [...Array(layers).keys()].map((l) => [l, `layer ${l + 1}`]), state.layer, (value) => {
      state.layer = Number(value);
      redraw();
    }),
    choice("Head", [...[...Array(data.map_heads).keys()].map((h) => [h, `head ${h + 1}`]),
      ["mean", "mean of the heads"], ...(data.map_heads ? [["all", "every head"]] : [])], state.head, (value) => {
      state.head = value === "mean" || value === "all" ? value : Number(value);
      redraw();
    }),
  );
}

function drawEpochMap({ data, maps, state, boxes }) {
  const [rows, columns] = axes(data, state.kind);
  const layers = data.layers[state.kind];
  const size = rows.length * columns.length;
  const at = (head) => (((state.at * layers + state.layer) * (data.map_heads + 1)) + head) * size;
  if (!data.map_heads) state.head = "mean";  // the means alone were sent: a long run of a large model
  boxes.map.replaceChildren();
  const where = `${data.labels[state.at]} · ${KIND_NAMES[state.kind]}, layer ${state.layer + 1}`;
  if (state.head === "all") {
    const small = element("div", "small-maps");
    for (let h = 0; h < data.map_heads; h += 1) {
      const box = element("div", "map");
      drawGrid(box, `head ${h + 1}`, rows, columns, maps[state.kind], at(h), data.colors, data.quantum);
      small.append(box);
    }
    boxes.map.append(element("div", "map-title", `${where}, every head`), small);
    return;
  }
  const head = state.head === "mean" ? data.map_heads : state.head;
  const name = state.head === "mean" ? "mean of the heads" : `head ${head + 1}`;
  drawGrid(boxes.map, `${where}, ${name}`, rows, columns, maps[state.kind], at(head), data.colors, data.quantum);
}

// A sparkline of each head's measure over the snapshots, the one shown marked, and its value there.
function sparkCell(values, now, high, title, shown) {
  const cell = element("div", "head-cell");
  cell.append(sparkline(values, now, high, title), element("span", "spark-value", shown));
  return cell;
}

function drawHeadTable({ data, state, boxes }) {
  const kind = state.kind, layer = state.layer, s = state.at;
  const distance = data.distance[kind], entropy = data.entropy[kind];
  const column = (table, h) => table.map((bySnapshot) => bySnapshot[layer][h]);
  const high = (table) => Math.max(...table.flatMap((bySnapshot) => bySnapshot[layer]), 1e-9);
  boxes.heads.replaceChildren(element("div", "map-title", `How each head of layer ${layer + 1} changed`));
  const table = element("div", "head-table");
  const aer = kind === "cross" ? data.aer : null;
  table.style.gridTemplateColumns = `max-content repeat(${aer ? 3 : 2}, max-content) max-content`;
  ["", "distance from the last", "entropy", ...(aer ? ["AER"] : []), "settles at"].forEach((text) =>
    table.append(element("div", "head-cell head", text)));
  for (let h = 0; h < data.heads; h += 1) {
    const settled = data.settled[kind][layer][h];
    table.append(element("div", "head-cell name", `head ${h + 1}`));
    for (const [values, top, what] of [[column(distance, h), high(distance), "distance"],
      [column(entropy, h), high(entropy), "entropy"]]) {
      table.append(sparkCell(values, s, top, `head ${h + 1}'s ${what} by epoch`, number(values[s])));
    }
    if (aer) {
      const values = column(aer, h);
      table.append(sparkCell(values, s, 1, `head ${h + 1}'s AER by epoch`,
        values[s] === null ? "–" : values[s].toFixed(2)));
    }
    table.append(element("div", settled <= s ? "head-cell settled" : "head-cell", data.labels[settled]));
  }
  boxes.heads.append(table, element("p", "note", `Distance: the Jensen-Shannon divergence (nats, 0 the same, 0.69 `
    + `disjoint) of the head's rows from the last epoch's, over the probe sentences; a head settles at the first `
    + `epoch from which it stays under ${data.settled_below}. Entropy: nats, higher is more spread.`
    + (aer ? ` AER: ${data.aer_method} (lower is better).` : "")));
}

function drawLensRanks({ data, state, boxes }) {
  boxes.lens.replaceChildren(element("div", "map-title", "Each decoder layer's rank of the reference token "
    + "(the logit lens; 1: the layer's top guess)"));
  const grid = element("div", "grid lens-ranks");
  grid.style.gridTemplateColumns = `max-content repeat(${data.tgt.length}, minmax(2.2rem, 1fr))`;
  data.lens_rank[state.at].forEach((ranks, layer) => {
    grid.append(element("div", "row-label", `layer ${layer + 1}`));
    ranks.forEach((rank, t) => {
      const cell = element("div", "cell rank", rank > 999 ? "999+" : String(rank));
      cell.style.background = colorOf(data.colors, 1 / rank);
      cell.classList.toggle("light", 1 / rank < 0.5);
      cell.title = `layer ${layer + 1} ranks "${data.tgt[t]}" ${rank}`;
      grid.append(cell);
    });
  });
  grid.append(element("div"));
  data.tgt.forEach((label) => grid.append(element("div", "key-label", label)));
  boxes.lens.append(grid);
}

function drawTokenProbabilities({ data, state, boxes }) {
  const values = data.token_probs[state.at];
  const mean = values.reduce((a, b) => a + (b ?? 0), 0) / values.length;
  boxes.probs.replaceChildren(element("div", "map-title",
    `The probability this epoch gives each reference token (mean ${number(mean)})`));
  const strip = element("div", "prob-strip");
  values.forEach((p, t) => {
    const token = element("span", "prob-token");
    const swatch = element("span", "prob-cell", p === null ? "–" : p.toFixed(2));
    swatch.style.background = p === null ? "#d5d7de" : colorOf(data.colors, p);
    swatch.classList.toggle("light", p !== null && p < 0.5);
    token.append(swatch, element("span", "prob-label", data.tgt[t]));
    token.title = `${data.tgt[t]}: ${number(p)}`;
    strip.append(token);
  });
  boxes.probs.append(strip);
}

// One line of text: a label, then what it labels.
function labelled(label, text) {
  const line = element("p", "output", "");
  line.append(element("span", "output-label", label), element("span", "output-text", text));
  return line;
}

function drawEpoch(view) {
  const { data, state, boxes } = view;
  const s = state.at;
  [...boxes.marks.children].forEach((mark, i) => mark.setAttribute("aria-pressed", String(i === s)));
  const bleu = data.val_bleu[s];
  boxes.caption.replaceChildren(element("b", "", data.labels[s]), ` (${s + 1} of ${data.labels.length})`,
    data.steps[s] ? ` · ${data.steps[s].toLocaleString("en")} training steps` : " · random weights, no training",
    bleu === null ? "" : ` · validation BLEU ${bleu.toFixed(1)}`);
  boxes.outputs.replaceChildren(labelled("Its translation: ", data.outputs[s]),
    labelled("The reference every map reads: ", data.reference));
  drawTokenProbabilities(view);
  drawViewChoice(view);
  drawEpochMap(view);
  drawHeadTable(view);
  drawLensRanks(view);
  drawCurve(boxes.bleu, "Validation BLEU by epoch", data.epochs, data.val_bleu, data.epochs[s], "epoch");
  drawCurve(boxes.loss, "Training loss by step", data.loss.steps, data.loss.values, data.steps[s], "step");
  writeViewToAddress(data, state);
}

export default function (component) {
  const { parentElement, key } = component;
  const [data] = component.data; // a one-item list, as the step view's
  clearInterval(epochTimers.get(key));
  const last = data.labels.length - 1;
  const maps = Object.fromEntries(Object.entries(data.maps).map(([kind, text]) => [kind, decoded(text)]));
  const before = epochHeld.get(key);
  const kept = before && before.id === data.id;
  const state = kept ? before : { id: data.id, at: data.snapshot, kind: data.kind, layer: data.layer,
    head: data.head, rate: data.rates[1] };
  epochHeld.set(key, state);
  // Play at the end plays the run again
  const stepper = stepControls({ key, timers: epochTimers, state, last, rates: data.rates, noun: "Epoch", sliderFrom: 0,
    show: () => view.redraw(), replay: true });
  const { root, boxes } = epochLayout(data, stepper);
  const view = { data, maps, state, boxes, redraw: () => drawEpoch(view) };
  mount(parentElement, root);
  epochSteppers.set(key, { root, go: (delta) => stepper.go(state.at + delta) });
  stepper.draw();
  stepper.stop();
  return () => epochSteppers.delete(key);
}
