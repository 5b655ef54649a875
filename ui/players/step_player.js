// The explorer's step view in the browser: every step's data arrives once; stepping and Play draw it
// here and send nothing. Only an action (what-if, Attention maps at this step) goes to the server.

const held = new Map(); // component key -> {id, serverStep, at, rate, lens}: the visitor's step across redraws
const timers = new Map(); // component key -> Play's interval (Streamlit keeps no cleanup between redraws)
const leaving = new Map(); // component key -> (link) => whether it took the visitor to the link's page itself

// A plain click on one of the app's links (the sidebar's pages, a page link) leaves the page. When the visitor has
// stepped in the browser, the step view asks the server for that page itself, with the step: the next page opens
// at it. One message a page left, none a step.
document.addEventListener(
  "click",
  (event) => {
    const link = event.target.closest?.("a[href]");
    const plain = event.button === 0 && !(event.ctrlKey || event.metaKey || event.shiftKey || event.altKey);
    if (!link || !plain || link.origin !== window.location.origin) return;
    if ([...leaving.values()].some((leave) => leave(link))) {
      event.preventDefault();
      event.stopPropagation();
    }
  },
  true,
);

const steppers = new Map(); // component key -> {root, go}: each mounted step view and how it steps
stepWithArrowKeys(steppers);

let lensDetailsOpen = false; // whether the visitor opened "How the lens reads a layer"

// words[i], where given, is the word candidate i would make (the model continued greedily after it): "ch → chat".
function drawBars(box, title, labels, probs, chosenIndex, words) {
  box.replaceChildren();
  box.append(element("div", "map-title", title));
  const bars = element("div", "bars");  // one grid: every bar starts where the longest label ends
  box.append(bars);
  labels.forEach((label, i) => {
    const line = element("div", "bar-line");
    const name = element("span", "bar-label", label);
    const word = words?.[i];
    if (word) name.append(element("span", "word-made", ` → ${word}`));
    line.append(name);
    const track = element("span", "bar-track");
    const bar = element("span", i === chosenIndex ? "bar chosen" : "bar");
    bar.style.width = `${((probs[i] ?? 0) * 100).toFixed(1)}%`;
    track.append(bar);
    line.append(track, element("span", "bar-value", number(probs[i])));
    line.title = `${label}${word ? ` (would make "${word}")` : ""}: ${number(probs[i])}`;
    bars.append(line);
  });
}

// The logit lens at one step: each decoder layer's top guesses and the rank it gave the token taken; beside it a
// strip of every step (a column each) coloured by the probability each layer gave that step's token.
function drawLens(box, data, step, go, state) {
  if (data.lens === null && data.tuned_lens === null) { // a large vocabulary: read when the visitor asks (the server)
    box.replaceChildren(element("p", "lens-plain", "What each decoder layer would predict (the logit lens) is read "
      + "for a model of this size when asked: the switch “Each layer's guesses” above."));
    return;
  }
  const tuned = data.tuned_lens !== null && (state.lens === "tuned" || data.lens === null);
  const lens = tuned ? data.tuned_lens : data.lens;
  const layers = lens.rank[0].length;
  const guesses = lens.top_ids[0][0].length;
  box.replaceChildren();
  box.append(element("div", "map-title", `what each decoder layer would predict at step ${step + 1}`));
  if (data.tuned_lens !== null && data.lens !== null) {
    const choice = element("div", "lens-choice");
    choice.append("read with ");
    [["logit", "the logit lens"], ["tuned", "the tuned lens"]].forEach(([name, label]) => {
      const option = button(label, name === "tuned" ? "each early layer's output first mapped as fitted for the output layer to read" : "each layer's output read as it is");
      option.setAttribute("aria-pressed", String(name === (tuned ? "tuned" : "logit")));
      option.onclick = () => {
        state.lens = name;
        drawLens(box, data, step, go, state);
        writeLensToAddress(state.lens);
      };
      choice.append(option);
    });
    box.append(choice);
  }
  const table = element("div", "lens-table");
  table.style.gridTemplateColumns = `max-content max-content repeat(${guesses}, max-content)`;
  table.append(element("span", "lens-head", ""), element("span", "lens-head", `'${data.next[step]}', taken`));
  const heading = element("span", "lens-head", "its guesses, best first");
  heading.style.gridColumn = `span ${guesses}`;
  table.append(heading);
  for (let layer = 0; layer < layers; layer++) {
    const rank = lens.rank[step][layer];
    table.append(element("span", "lens-layer", layer === layers - 1 ? `layer ${layer + 1} (output)` : `layer ${layer + 1}`));
    const chosen = element("span", rank === 1 ? "lens-chosen top" : "lens-chosen",
      `rank ${rank.toLocaleString("en")} · ${number(lens.chosen_prob[step][layer])}`);
    chosen.title = `the rank and probability layer ${layer + 1} gave '${data.next[step]}'`;
    table.append(chosen);
    lens.top_ids[step][layer].forEach((id, i) => {
      const guess = element("span", id === data.chosen[step] ? "guess taken" : "guess");
      guess.append(element("span", "guess-token", lens.labels[id]), ` ${number(lens.top_probs[step][layer][i])}`);
      guess.title = `${lens.labels[id]}: ${number(lens.top_probs[step][layer][i])}`;
      table.append(guess);
    });
  }
  const strip = element("div", "strip");
  strip.style.gridTemplateColumns = `max-content repeat(${data.steps}, minmax(0.9rem, 1.6rem))`;
  for (let layer = 0; layer < layers; layer++) {
    strip.append(element("div", "row-label", `layer ${layer + 1}`));
    for (let t = 0; t < data.steps; t++) {
      const p = lens.chosen_prob[t][layer];
      const cell = element("div", t === step ? "cell now" : "cell");
      cell.style.background = p === null ? "#d5d7de" : colorOf(data.colors, p);
      cell.title = `step ${t + 1}, '${data.next[t]}'\nlayer ${layer + 1}: probability ${number(p)}, rank ${lens.rank[t][layer]}`;
      cell.onclick = () => go(t);
      strip.append(cell);
    }
  }
  strip.append(element("div"));
  data.next.forEach((token, t) => {
    const label = element("div", t === step ? "key-label now" : "key-label", token);
    label.title = token;
    strip.append(label);
  });
  const stripBox = element("div", "map");
  stripBox.append(element("div", "strip-title", "the probability each layer gave the token taken, at every step "
    + "(a column opens its step)"), strip);
  const parts = element("div", "lens-parts");
  parts.append(table, stripBox);
  const kl = data.tuned_lens?.kl;
  const measured = kl ? " Held out, the mean KL divergence from the output: " + kl[0].map((plain, layer) =>
    `layer ${layer + 1} ${number(plain)} nats with the logit lens, ${number(kl[1][layer])} with the tuned lens`).join("; ")
    + "." : "";
  // One plain sentence for a class; how the lens reads a layer, for researchers, one click away.
  const details = document.createElement("details");
  details.className = "lens-details";
  details.open = lensDetailsOpen; // kept open from step to step once opened
  details.addEventListener("toggle", () => { lensDetailsOpen = details.open; });
  details.append(element("summary", "lens-summary", "How the lens reads a layer"));
  box.append(parts, element("p", "lens-plain", "What each layer would write at this step if it were the last one: "
    + "read down a column to watch the model make up its mind, layer by layer."), details);
  // A strip wider than its box scrolls: the step on screen is kept in view (it hid past the box's right edge). Read
  // at the next frame, once the whole step is drawn: read here it laid the page out twice a step (half a click's time).
  requestAnimationFrame(() => {
    const now = strip.querySelector(".key-label.now").getBoundingClientRect();
    const shown = stripBox.getBoundingClientRect();
    stripBox.scrollLeft += now.left + now.width / 2 - (shown.left + shown.width / 2);
  });
  details.append(element("p", "lens-note", tuned
    ? "Each early layer's output is first moved by an affine map fitted on a corpus so that the output layer reads it "
      + "as it reads the last layer's (the tuned lens, Belrose et al. 2023), then put through the final normalisation "
      + "and output layer. The maps are fitted, not the model: a guess here is what a layer's output holds in a form a "
      + "trained reader can find." + measured
    : "Each layer's output is put through the model's final normalisation and output layer as if it were the last (the "
      + "logit lens). Early layers need not use the output layer's basis, so the lens understates what they hold: read a "
      + "low probability there as 'not yet readable this way', not 'not yet known' (Belrose et al. 2023 fit a map per "
      + "layer, the tuned lens, for this" + (kl ? ": offered above for this checkpoint" : "") + ")." + measured));
}

// The beam tree's grid in px at its 12 px text; a projector's 18 px text scales all of it by 1.5.
const TREE = { column: 98, row: 26, box: 84, top: 22, left: 4, bars: 60, caption: 18, node: 20, text: 14, step: 13 };
const TREE_PROJECTOR_SCALE = 1.5;
const TREE_LABEL_CHARACTERS = 10; // a longer hypothesis' piece is cut, whole in its hover text
const TREE_MIN_BOX = 40; // px at 12 px text: room for a step's number above a one-character box
const TREE_ALL_UNDER = 150; // nodes: a larger search opens with its dropped hypotheses folded away

// A beam search as a tree: a column per step, each hypothesis kept (in the beam's order) then those finished there;
// the output's path in blue, dropped ones grey, finished ones marked; under it, P(</s>) at each step of the output.
// A click on a hypothesis asks the server to continue it greedily as a what-if branch.
function drawTree(box, beam, step, choose, scale) {
  box.replaceChildren();
  const count = beam.step.length;
  const dropped = beam.dropped.filter(Boolean).length;
  box.append(element("div", "map-title", `the beam's whole search (width ${beam.width}): every hypothesis kept, step by step`));
  const options = element("label", "tree-option");
  const showAll = element("input");
  showAll.type = "checkbox";
  showAll.checked = box.dataset.showAll ? box.dataset.showAll === "1" : count <= TREE_ALL_UNDER;
  options.append(showAll, ` show the ${dropped} dropped hypotheses`);
  showAll.onchange = () => {
    box.dataset.showAll = showAll.checked ? "1" : "0";
    drawTree(box, beam, step, choose, scale);
  };
  box.append(element("p", "tree-legend", "Blue: the output's path. Grey: dropped (nothing grown from it was left "
    + "at the end). ■: finished with </s>. Hover for a hypothesis' text and scores; click one to continue it greedily "
    + "as a what-if branch."), options);
  const shown = beam.step.map((_, i) => showAll.checked || !beam.dropped[i]);
  const steps = Math.max(...beam.step) + 1;
  const rows = Math.max(...beam.slot.filter((_, i) => shown[i])) + 1; // no empty rows where folded ones were
  // Boxes as wide as the longest label shown needs (7 px a character at 12 px, "■ " included): a short output's tree
  // then fits a projector's width, where boxes made for ten characters scrolled "I love you."'s six steps sideways.
  const characters = Math.max(...beam.label.map((piece, i) => (shown[i]
    ? Math.min(piece.length, TREE_LABEL_CHARACTERS) + (beam.finished[i] ? 2 : 0) : 0)));
  const boxWidth = Math.min(TREE.box, Math.max(TREE_MIN_BOX, 10 + 7 * characters));
  const sized = { ...TREE, box: boxWidth, column: boxWidth + TREE.column - TREE.box };
  const G = Object.fromEntries(Object.entries(sized).map(([name, px]) => [name, px * scale]));
  const x = (t) => G.left + t * G.column;
  const y = (slot) => G.top + slot * G.row;
  const base = y(rows) + G.bars; // the P(</s>) bars stand on it
  const height = base + G.caption + 4;
  const drawing = svg("svg", { width: x(steps) + 8, height, class: "tree" });
  drawing.append(svg("rect", { x: x(step) - 4, y: 0, width: G.column, height: base + 2, class: "tree-now" }));
  for (let t = 0; t < steps; t++) drawing.append(svg("text", { x: x(t) + G.box / 2, y: G.step, class: "tree-step" }, `${t + 1}`));
  const edges = svg("g");
  const nodes = svg("g");
  for (let i = 0; i < count; i++) {
    if (!shown[i]) continue;
    const kind = beam.on_path[i] ? "winner" : beam.dropped[i] ? "dropped" : "kept";
    const [nx, ny] = [x(beam.step[i]), y(beam.slot[i])];
    const parent = beam.parent[i];
    if (parent >= 0) {
      const [px, py, my] = [x(beam.step[parent]) + G.box, y(beam.slot[parent]) + G.node / 2, ny + G.node / 2];
      const middle = (px + nx) / 2;
      edges.append(svg("path", { d: `M${px},${py} C${middle},${py} ${middle},${my} ${nx},${my}`, class: `edge ${kind}` }));
    }
    const node = svg("g", { class: `node ${kind}${beam.finished[i] ? " finished" : ""}`, transform: `translate(${nx},${ny})` });
    node.append(svg("rect", { width: G.box, height: G.node, rx: 4 }));
    const piece = beam.label[i];
    const label = piece.length > TREE_LABEL_CHARACTERS ? `${piece.slice(0, TREE_LABEL_CHARACTERS - 1)}…` : piece;
    node.append(svg("text", { x: 5 * scale, y: G.text }, beam.finished[i] ? `■ ${label}` : label));
    node.append(svg("title", {}, `${beam.text[i] || "(nothing yet)"}${beam.finished[i] ? " </s>" : ""}\nlog-probability ${number(beam.log_prob[i])}\nscore with the length penalty ${number(beam.score[i])}`));
    node.onclick = () => choose(i);
    nodes.append(node);
  }
  drawing.append(edges, nodes);
  // Each step's P(</s>) as a bar in a track of height 1, its value above it: a hairline said nothing.
  const tall = G.bars - G.caption;
  beam.eos_probs.forEach((p, t) => {
    const value = p ?? 0;
    drawing.append(svg("rect", { x: x(t), y: base - tall, width: G.box, height: tall, class: "eos-track" }));
    const bar = svg("rect", { x: x(t), y: base - Math.max(value * tall, 1), width: G.box, height: Math.max(value * tall, 1), class: "eos-bar" });
    bar.append(svg("title", {}, `step ${t + 1}: P(</s>) for the output ${number(p)}`));
    drawing.append(bar, svg("text", { x: x(t) + G.box / 2, y: base - tall - 4, class: "eos-value" }, value.toFixed(2)));
  });
  drawing.append(svg("text", { x: x(0), y: base + G.caption - 2, class: "tree-caption" },
    "P(</s>) at each step of the output (a full bar: 1)"));
  const scroller = element("div", "map tree-scroller");
  scroller.append(drawing);
  // Wider than the page: buttons and a line say which steps are in view (a scrollbar may be hidden, or unseen).
  const nav = element("div", "tree-nav");
  const earlier = button("◀ earlier steps", "Scroll the tree to earlier steps");
  const later = button("later steps ▶", "Scroll the tree to later steps");
  const inView = element("span", "tree-in-view");
  nav.append(earlier, later, inView);
  const showInView = () => {
    const first = Math.max(0, Math.ceil((scroller.scrollLeft - G.left) / G.column));
    const last = Math.min(steps, Math.floor((scroller.scrollLeft + scroller.clientWidth - G.left) / G.column));
    inView.textContent = last - first >= steps ? `all ${steps} steps` : `steps ${first + 1}–${last} of ${steps} in view`;
    earlier.disabled = scroller.scrollLeft <= 0;
    later.disabled = scroller.scrollLeft + scroller.clientWidth >= scroller.scrollWidth - 1;
    nav.hidden = earlier.disabled && later.disabled;
  };
  earlier.onclick = () => { scroller.scrollLeft -= scroller.clientWidth - G.column; showInView(); };
  later.onclick = () => { scroller.scrollLeft += scroller.clientWidth - G.column; showInView(); };
  scroller.onscroll = showInView;
  box.append(nav, scroller);
  scroller.scrollLeft = Math.max(0, x(step) - scroller.clientWidth / 2);
  showInView();
  const winner = beam.winner;
  const best = beam.best_unpenalised;
  const penalty = best === null || best === winner
    ? "With no length penalty the same hypothesis wins among those finished."
    : `With no length penalty, "${beam.text[best]}" would win (log-probability ${number(beam.log_prob[best])} against `
      + `${number(beam.log_prob[winner])}): the length penalty, ((5 + length) / 6)^${beam.alpha}, favoured the longer one.`;
  box.append(element("p", "tree-legend", `The output: log-probability ${number(beam.log_prob[winner])}, score `
    + `${number(beam.score[winner])}. ${penalty}`));
}

// The lens the view reads with goes into the address too (the server never hears of it: a link names it).
// ALTI+ at one step: how much of the step's token came from the source and from the output so far, through the
// whole model, and each source and prefix token's share; under it, every step's share from the source (a click on
// one goes to it).
function drawContributions(box, data, step, go, values) {
  const found = data.contributions;
  const share = found.share[step];
  const percent = (value) => `${Math.round(value * 100)} %`;
  box.replaceChildren(element("div", "map-title", `Where step ${step + 1}'s token came from, through the whole model `
    + `(ALTI+): ${percent(share)} from the source, ${percent(1 - share)} from the output so far`));
  drawGrid(box, "its shares of the source", [`step ${step + 1}`], data.cross_labels, values.source,
    step * data.cross_labels.length, data.colors, data.quantum, 0, "share");
  drawGrid(box, "its shares of the output so far", [`step ${step + 1}`], data.self_labels[step], values.prefix,
    values.prefixOffsets[step], data.colors, data.quantum, 0, "share");
  box.append(element("div", "map-title", "Each step's share from the source (click one to go to it)"));
  const strip = element("div", "grid strip");
  strip.style.gridTemplateColumns = `max-content repeat(${data.steps}, minmax(var(--cell-width), 1fr))`;
  strip.append(element("div", "row-label", "from the source"));
  found.share.forEach((value, t) => {
    const cell = element("div", t === step ? "cell now" : "cell");
    cell.style.background = value === null ? "#d5d7de" : colorOf(data.colors, value);
    cell.title = `step ${t + 1}, ${data.next[t]}: ${value === null ? "not a number" : percent(value)} from the source`;
    cell.onclick = () => go(t);
    strip.append(cell);
  });
  strip.append(element("div"));
  data.next.forEach((label, t) => strip.append(element("div", t === step ? "key-label now" : "key-label", label)));
  box.append(strip);
}

function writeLensToAddress(lens) {
  const url = new URL(window.location.href);
  if (lens === "tuned") url.searchParams.set("lens", "tuned");
  else url.searchParams.delete("lens");
  if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url);
}

function writeStepToAddress(step) {
  const url = new URL(window.location.href);
  if (url.searchParams.get("step") === String(step + 1)) return;
  url.searchParams.set("step", String(step + 1));
  window.history.replaceState(window.history.state, "", url);
}

export default function (component) {
  const { parentElement, key, setTriggerValue } = component;
  const [data] = component.data; // the server sends a one-item list (see step_player.py)
  clearInterval(timers.get(key));
  const cross = decoded(data.cross);
  const selfValues = decoded(data.self);
  const selfOffsets = [0];
  data.self_labels.forEach((labels) => selfOffsets.push(selfOffsets.at(-1) + data.rows.length * labels.length));
  const last = data.steps - 1;
  const contributions = data.contributions && {
    source: decoded(data.contributions.source),
    prefix: decoded(data.contributions.prefix),
    prefixOffsets: data.self_labels.reduce((offsets, labels) => [...offsets, offsets.at(-1) + labels.length], [0]),
  };
  const before = held.get(key);
  const kept = before && before.id === data.id && before.serverStep === data.step;
  const state = {
    id: data.id,
    serverStep: data.step,
    at: Math.min(kept ? before.at : data.step, last),
    rate: before ? before.rate : data.rates[1],
    lens: before ? before.lens : data.lens_choice,
  };
  held.set(key, state);

  const root = element("div", data.presentation ? "player presentation" : "player");
  root.tabIndex = 0;
  const stepper = stepControls({ key, timers, state, last, rates: data.rates, noun: "Step", sliderFrom: 1, show: draw,
    moved: () => writeStepToAddress(state.at) });
  const { go, stop } = stepper;
  const caption = element("p", "caption");
  const body = element("div", "body");
  const left = element("div", "left");
  const bars = element("div", "candidates");
  const whatIf = element("div", "what-if");
  const candidate = element("select", "candidate");
  candidate.setAttribute("aria-label", "What if the model had taken");
  const branch = button("Continue from this token", "Decode again from this step with the token picked");
  whatIf.append(element("label", "what-if-label", "What if the model had taken"), candidate, branch);
  left.append(bars, whatIf);
  const right = element("div", "right");
  const crossBox = element("div", "map");
  const selfBox = element("div", "map");
  const contributionsBox = element("div", "map contributions");
  const lensBox = element("div", "lens");
  const treeBox = element("div", "lens");
  right.append(crossBox, selfBox, ...(contributions ? [contributionsBox] : []));
  body.append(left, right);
  const open = button("Open Attention maps at this step", "The full maps, rows up to this step");
  root.append(stepper.controls, stepper.slider, caption, body, lensBox, ...(data.beam ? [treeBox] : []), open);
  parentElement.querySelector(".player")?.remove();
  parentElement.append(root);
  if (data.scroll_into_view) {  // a beam hypothesis just opened as a branch: its output and the way back in view
    const main = parentElement.getRootNode().host?.closest('[data-testid="stMain"]');
    main?.scrollTo({ top: 0 });
  }

  function draw() {
    const step = state.at;
    const forced = step < data.forced; // a language code every output starts with: set, not chosen
    caption.replaceChildren(
      element("b", "", `Step ${step + 1} of ${data.steps}`),
      ` · so far: ${data.so_far[step] || "(nothing yet)"} → next token `,
      element("b", "", data.next[step]),
      forced ? ` (forced: the target language's code, which every output of this model starts with, whatever the `
        + `model gives it: here ${number(data.prob[step])})`
        : ` (probability ${number(data.prob[step])}; the step's entropy ${number(data.entropy[step])} bits)`,
    );
    whatIf.hidden = forced;
    const ids = data.topk_ids[step];
    const labels = data.topk_labels[step];
    const words = data.topk_words?.[step];
    drawBars(bars, `top ${ids.length} candidates for step ${step + 1}${words ? " (→ the word each would make)" : ""}`,
      labels, data.topk_probs[step], ids.indexOf(data.chosen[step]), words);
    candidate.replaceChildren();
    ids.forEach((id, i) => {
      if (id === data.chosen[step]) return;
      const option = element("option", "", words?.[i] ? `${labels[i]} → ${words[i]}` : labels[i]);
      option.value = String(id);
      candidate.append(option);
    });
    const crossSize = data.rows.length * data.cross_labels.length;
    const content = data.content_only ? " (content only: </s>, <s> and punctuation dropped, rows renormalised)" : "";
    redrawGrid(crossBox, `encoder-decoder attention of step ${step + 1} over the source${content}`, data.rows,
      data.cross_labels, cross, step * crossSize, data.colors, data.quantum, data.heads);
    redrawGrid(selfBox, `masked self-attention of step ${step + 1} over the output so far${content}`, data.rows,
      data.self_labels[step], selfValues, selfOffsets[step], data.colors, data.quantum, data.heads);
    if (contributions) drawContributions(contributionsBox, data, step, go, contributions);
    drawLens(lensBox, data, step, go, state);
    if (data.beam) drawTree(treeBox, data.beam, step, (node) => {
      stop();
      setTriggerValue("action", { name: "beam_node", node });
    }, data.presentation ? TREE_PROJECTOR_SCALE : 1);
  }

  root.onkeydown = (event) => {
    if (event.target.matches("input, select")) return; // the slider and the menus step with the keys themselves
    if (event.key === "ArrowRight") go(state.at + 1);
    else if (event.key === "ArrowLeft") go(state.at - 1);
    else return;
    event.preventDefault();
  };
  branch.onclick = () => {
    if (!candidate.value) return;
    stop();
    setTriggerValue("action", { name: "what_if", step: state.at, token: Number(candidate.value) });
  };
  open.onclick = () => {
    stop();
    setTriggerValue("action", { name: "attention", step: state.at });
  };
  steppers.set(key, { root, go: (delta) => go(state.at + delta) });
  leaving.set(key, (link) => {
    if (state.at === state.serverStep) return false; // the server knows the step: the link goes as it is
    stop();
    setTriggerValue("action", { name: "leave", step: state.at, page: link.pathname });
    return true;
  });
  stepper.draw();
  stop();
  if (state.at !== data.step) writeStepToAddress(state.at); // the server's redraw wrote its own step
  if (state.lens !== data.lens_choice && data.tuned_lens !== null) writeLensToAddress(state.lens); // and its own lens
  return () => leaving.delete(key);
}
