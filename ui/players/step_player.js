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

function writeStepToAddress(step) {
  const url = new URL(window.location.href);
  if (url.searchParams.get("step") === String(step + 1)) return;
  url.searchParams.set("step", String(step + 1));
  window.history.replaceState(window.history.state, "", url);
}

// The step view's boxes under the step controls: the candidates and the what-if on the left, the maps on the right,
// the lens and the beam tree below, and the way to Attention maps.
function stepLayout(data, stepper, withContributions) {
  const boxes = elements({ caption: "p caption", body: "div body", left: "div left", bars: "div candidates",
    whatIf: "div what-if", candidate: "select candidate", right: "div right", cross: "div map", self: "div map",
    contributions: "div map contributions", lens: "div lens", tree: "div lens" });
  boxes.candidate.setAttribute("aria-label", "What if the model had taken");
  boxes.branch = button("Continue from this token", "Decode again from this step with the token picked");
  boxes.whatIf.append(element("label", "what-if-label", "What if the model had taken"), boxes.candidate, boxes.branch);
  boxes.left.append(boxes.bars, boxes.whatIf);
  boxes.right.append(boxes.cross, boxes.self, ...(withContributions ? [boxes.contributions] : []));
  boxes.body.append(boxes.left, boxes.right);
  boxes.open = button("Open Attention maps at this step", "The full maps, rows up to this step");
  boxes.why = button("Why this token? Ask the Cause page", "Cause opens with this step's token against the likeliest other");
  const root = element("div", data.presentation ? "player presentation" : "player");
  root.tabIndex = 0;
  root.append(stepper.controls, stepper.slider, boxes.caption, boxes.body, boxes.lens,
    ...(data.beam ? [boxes.tree] : []), boxes.open, boxes.why);
  return { root, boxes };
}

// The step's candidates: their bars, and the what-if's choice among those the model did not take.
function drawCandidates({ data, boxes }, step) {
  const ids = data.topk_ids[step];
  const labels = data.topk_labels[step];
  const words = data.topk_words?.[step];
  drawBars(boxes.bars, `top ${ids.length} candidates for step ${step + 1}${words ? " (→ the word each would make)" : ""}`,
    labels, data.topk_probs[step], ids.indexOf(data.chosen[step]), words);
  boxes.candidate.replaceChildren();
  ids.forEach((id, i) => {
    if (id === data.chosen[step]) return;
    const option = element("option", "", words?.[i] ? `${labels[i]} → ${words[i]}` : labels[i]);
    option.value = String(id);
    boxes.candidate.append(option);
  });
}

function drawStep(view) {
  const { data, state, boxes, maps, stepper } = view;
  const step = state.at;
  const forced = step < data.forced; // a language code every output starts with: set, not chosen
  boxes.caption.replaceChildren(
    element("b", "", `Step ${step + 1} of ${data.steps}`),
    ` · so far: ${data.so_far[step] || "(nothing yet)"} → next token `,
    element("b", "", data.next[step]),
    forced ? ` (forced: the target language's code, which every output of this model starts with, whatever the `
      + `model gives it: here ${number(data.prob[step])})`
      : ` (probability ${number(data.prob[step])}; the step's entropy ${number(data.entropy[step])} bits)`,
  );
  boxes.whatIf.hidden = forced;
  drawCandidates(view, step);
  const crossSize = data.rows.length * data.cross_labels.length;
  const content = data.content_only ? " (content only: </s>, <s> and punctuation dropped, rows renormalised)" : "";
  redrawGrid(boxes.cross, `encoder-decoder attention of step ${step + 1} over the source${content}`, data.rows,
    data.cross_labels, maps.cross, step * crossSize, data.colors, data.quantum, data.heads);
  redrawGrid(boxes.self, `masked self-attention of step ${step + 1} over the output so far${content}`, data.rows,
    data.self_labels[step], maps.self, maps.selfOffsets[step], data.colors, data.quantum, data.heads);
  if (maps.contributions) drawContributions(boxes.contributions, data, step, stepper.go, maps.contributions);
  drawLens(boxes.lens, data, step, stepper.go, state);
  if (data.beam) drawTree(boxes.tree, data.beam, step, (node) => view.act({ name: "beam_node", node }),
    data.presentation ? TREE_PROJECTOR_SCALE : 1);
}

// What the visitor does that the server hears of: a what-if, Attention maps at this step, a page left at a step.
function wireStepActions({ key, data, state, boxes, stepper, act }, root) {
  root.onkeydown = (event) => {
    if (event.target.matches("input, select")) return; // the slider and the menus step with the keys themselves
    if (event.key === "ArrowRight") stepper.go(state.at + 1);
    else if (event.key === "ArrowLeft") stepper.go(state.at - 1);
    else return;
    event.preventDefault();
  };
  boxes.branch.onclick = () => {
    if (boxes.candidate.value) act({ name: "what_if", step: state.at, token: Number(boxes.candidate.value) });
  };
  boxes.open.onclick = () => act({ name: "attention", step: state.at });
  boxes.why.onclick = () => act({ name: "why", step: state.at });
  leaving.set(key, (link) => {
    if (state.at === state.serverStep) return false; // the server knows the step: the link goes as it is
    act({ name: "leave", step: state.at, page: link.pathname });
    return true;
  });
}

// Every step's weights, unpacked once: cross-attention's, the self-attention's with each step's offset into them,
// and ALTI+'s shares where they were sent.
function unpackedMaps(data) {
  const selfOffsets = [0];
  data.self_labels.forEach((labels) => selfOffsets.push(selfOffsets.at(-1) + data.rows.length * labels.length));
  const contributions = data.contributions && {
    source: decoded(data.contributions.source),
    prefix: decoded(data.contributions.prefix),
    prefixOffsets: data.self_labels.reduce((offsets, labels) => [...offsets, offsets.at(-1) + labels.length], [0]),
  };
  return { cross: decoded(data.cross), self: decoded(data.self), selfOffsets, contributions };
}

export default function (component) {
  const { parentElement, key, setTriggerValue } = component;
  const [data] = component.data; // the server sends a one-item list (see step_player.py)
  clearInterval(timers.get(key));
  const last = data.steps - 1;
  const before = held.get(key);
  const kept = before && before.id === data.id && before.serverStep === data.step;
  const state = {
    id: data.id,
    serverStep: data.step,
    at: Math.min(kept ? before.at : data.step, last),
    rate: before ? before.rate : data.rates[1],
    // the lens kept across redraws, but the encoder's layers opened as the switch asking for them is turned on
    lens: before && !(data.encoder_lens !== null && !before.encoderSent) ? before.lens : data.lens_choice,
    encoderSent: data.encoder_lens !== null,
  };
  held.set(key, state);
  const stepper = stepControls({ key, timers, state, last, rates: data.rates, noun: "Step", sliderFrom: 1,
    show: () => drawStep(view), moved: () => writeStepToAddress(state.at) });
  const maps = unpackedMaps(data);
  const { root, boxes } = stepLayout(data, stepper, Boolean(maps.contributions));
  const act = (action) => {
    stepper.stop();
    setTriggerValue("action", action);
  };
  const view = { key, data, state, boxes, maps, stepper, act };
  mount(parentElement, root);
  if (data.scroll_into_view) {  // a beam hypothesis just opened as a branch: its output and the way back in view
    parentElement.getRootNode().host?.closest('[data-testid="stMain"]')?.scrollTo({ top: 0 });
  }
  wireStepActions(view, root);
  steppers.set(key, { root, go: (delta) => stepper.go(state.at + delta) });
  stepper.draw();
  stepper.stop();
  if (state.at !== data.step) writeStepToAddress(state.at); // the server's redraw wrote its own step
  if (state.lens !== data.lens_choice && data.tuned_lens !== null) writeLensToAddress(state.lens); // and its own lens
  return () => leaving.delete(key);
}
