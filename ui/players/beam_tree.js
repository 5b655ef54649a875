// The step view's beam tree (prepended to step_player.js with player_common.js): a beam search's whole search,
// drawn from the data the step view was sent.

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
  box.append(element("div", "map-title", `the beam's whole search (width ${beam.width}): every hypothesis kept, step by step`));
  const showAll = treeFolding(box, beam, step, choose, scale);
  const shown = beam.step.map((_, i) => showAll || !beam.dropped[i]);
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
  const drawing = svg("svg", { width: x(steps) + 8, height: base + G.caption + 4, class: "tree" });
  drawing.append(svg("rect", { x: x(step) - 4, y: 0, width: G.column, height: base + 2, class: "tree-now" }));
  for (let t = 0; t < steps; t++) drawing.append(svg("text", { x: x(t) + G.box / 2, y: G.step, class: "tree-step" }, `${t + 1}`));
  drawing.append(...treeNodes(beam, shown, G, x, y, choose, scale));
  drawEosBars(drawing, beam, G, x, base);
  const { nav, scroller, showInView } = treeScroller(drawing, G, steps);
  box.append(nav, scroller);
  scroller.scrollLeft = Math.max(0, x(step) - scroller.clientWidth / 2); // the step shown in the middle
  showInView();
  box.append(penaltyNote(beam));
}

// The legend, and whether the dropped hypotheses are shown (a large search opens with them folded away).
function treeFolding(box, beam, step, choose, scale) {
  const dropped = beam.dropped.filter(Boolean).length;
  const options = element("label", "tree-option");
  const showAll = element("input");
  showAll.type = "checkbox";
  showAll.checked = box.dataset.showAll ? box.dataset.showAll === "1" : beam.step.length <= TREE_ALL_UNDER;
  options.append(showAll, ` show the ${dropped} dropped hypotheses`);
  showAll.onchange = () => {
    box.dataset.showAll = showAll.checked ? "1" : "0";
    drawTree(box, beam, step, choose, scale);
  };
  box.append(element("p", "tree-legend", "Blue: the output's path. Grey: dropped (nothing grown from it was left "
    + "at the end). ■: finished with </s>. Hover for a hypothesis' text and scores; click one to continue it greedily "
    + "as a what-if branch."), options);
  return showAll.checked;
}

// Each hypothesis shown as a box at its step and slot, joined to its parent.
function treeNodes(beam, shown, G, x, y, choose, scale) {
  const edges = svg("g");
  const nodes = svg("g");
  for (let i = 0; i < beam.step.length; i++) {
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
  return [edges, nodes];
}

// Each step's P(</s>) as a bar in a track of height 1, its value above it: a hairline said nothing.
function drawEosBars(drawing, beam, G, x, base) {
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
}

// The drawing in a box that scrolls. Wider than the page: buttons and a line say which steps are in view (a scrollbar
// may be hidden, or unseen).
function treeScroller(drawing, G, steps) {
  const scroller = element("div", "map tree-scroller");
  scroller.append(drawing);
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
  return { nav, scroller, showInView };
}

// The output's scores, and whether the length penalty changed which hypothesis won.
function penaltyNote(beam) {
  const winner = beam.winner;
  const best = beam.best_unpenalised;
  const penalty = best === null || best === winner
    ? "With no length penalty the same hypothesis wins among those finished."
    : `With no length penalty, "${beam.text[best]}" would win (log-probability ${number(beam.log_prob[best])} against `
      + `${number(beam.log_prob[winner])}): the length penalty, ((5 + length) / 6)^${beam.alpha}, favoured the longer one.`;
  return element("p", "tree-legend", `The output: log-probability ${number(beam.log_prob[winner])}, score `
    + `${number(beam.score[winner])}. ${penalty}`);
}
