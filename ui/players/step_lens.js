// The step view's lens (loaded with step_player.js): what each decoder layer would predict (the logit lens, the
// tuned lens) and what each encoder layer already says (DecoderLens), at the step on screen and over every step.

let lensDetailsOpen = false; // whether the visitor opened "How the lens reads a layer"

// The lenses the server sent, in the order they are offered: the logit lens, the tuned lens, the encoder's layers
// (DecoderLens).
const LENSES = {
  logit: ["lens", "the logit lens", "each layer's output read as it is"],
  tuned: ["tuned_lens", "the tuned lens", "each early layer's output first mapped as fitted for the output layer to read"],
  encoder: ["encoder_lens", "the encoder's layers", "the decoder reading each encoder layer's output in place of the last one's (DecoderLens)"],
};

function lensesOffered(data) {
  return Object.keys(LENSES).filter((name) => data[LENSES[name][0]] !== null && data[LENSES[name][0]] !== undefined);
}

// A lens at one step: each layer's top guesses and the rank it gave the token taken; beside it a strip of every step
// (a column each) coloured by the probability each layer gave that step's token. The decoder's layers (the logit or
// the tuned lens), or the encoder's: what the decoder writes reading each encoder layer's output (DecoderLens), under
// the translation each of those layers makes.
function drawLens(box, data, step, go, state) {
  const offered = lensesOffered(data);
  if (!offered.length) { // a large vocabulary: read when the visitor asks (the server)
    box.replaceChildren(element("p", "lens-plain", "What each decoder layer would predict (the logit lens) is read "
      + "for a model of this size when asked: the switch “Each layer's guesses” above."));
    return;
  }
  const name = offered.includes(state.lens) ? state.lens : offered[0];
  const lens = data[LENSES[name][0]];
  const encoder = name === "encoder";
  box.replaceChildren();
  box.append(element("div", "map-title", encoder ? `what each encoder layer already says, read at step ${step + 1}`
    : `what each decoder layer would predict at step ${step + 1}`));
  if (offered.length > 1) box.append(lensChoice(box, data, step, go, state, offered, name));
  if (encoder) box.append(layerTranslations(lens));
  const { strip, stripBox } = lensStrip(data, lens, step, go, encoder);
  const parts = element("div", "lens-parts");
  parts.append(lensTable(data, lens, step, encoder), stripBox);
  box.append(parts, element("p", "lens-plain", encoder
    ? "What the decoder would write at this step reading each encoder layer's output in place of the last one's, the "
      + "output so far given: read down a column to see after which encoder layer the word is there."
    : "What each layer would write at this step if it were the last one: read down a column to watch the model make "
      + "up its mind, layer by layer."), encoder ? decoderLensDetails() : lensDetails(data, name === "tuned"));
  // A strip wider than its box scrolls: the step on screen is kept in view (it hid past the box's right edge). Read
  // at the next frame, once the whole step is drawn: read here it laid the page out twice a step (half a click's time).
  requestAnimationFrame(() => {
    const now = strip.querySelector(".key-label.now").getBoundingClientRect();
    const shown = stripBox.getBoundingClientRect();
    stripBox.scrollLeft += now.left + now.width / 2 - (shown.left + shown.width / 2);
  });
}

// Read with one of the lenses sent: the choice is the visitor's, kept in the address (the tuned lens; the encoder's
// layers are asked for by the page's switch, which the link keeps).
function lensChoice(box, data, step, go, state, offered, current) {
  const choice = element("div", "lens-choice");
  choice.append("read with ");
  offered.forEach((name) => {
    const option = button(LENSES[name][1], LENSES[name][2]);
    option.setAttribute("aria-pressed", String(name === current));
    option.onclick = () => {
      state.lens = name;
      drawLens(box, data, step, go, state);
      writeLensToAddress(state.lens);
    };
    choice.append(option);
  });
  return choice;
}

// DecoderLens' translations, one an encoder layer, the words the last layer's translation has not marked.
function layerTranslations(found) {
  const list = element("div", "layer-translations");
  found.translations.forEach((row) => {
    const line = element("p", "layer-translation");
    line.append(element("span", "lens-layer", `after encoder layer ${row.layer}:`));
    row.words.forEach((word, i) => line.append(" ", element("span", row.differs[i] ? "word differs" : "word", word)));
    if (!row.words.length) line.append(" ", element("span", "word differs", "(nothing)"));
    list.append(line);
  });
  list.append(element("p", "lens-note", "The translation the decoder writes (greedy) from each encoder layer's output; "
    + "underlined: the words the last layer's translation does not have."));
  return list;
}

function decoderLensDetails() {
  const details = document.createElement("details");
  details.className = "lens-details";
  details.open = lensDetailsOpen;
  details.addEventListener("toggle", () => { lensDetailsOpen = details.open; });
  details.append(element("summary", "lens-summary", "How DecoderLens reads an encoder layer"));
  details.append(element("p", "lens-note", "The decoder cross-attends to an intermediate encoder layer's output, put "
    + "through the encoder's final normalisation where the model has one (as the last layer's is), instead of the "
    + "last layer's, and decodes (Langedijk et al. 2023). The decoder was trained on the last layer's output only: "
    + "an early layer's translation shows what that layer's output already holds in a form the decoder can read."));
  return details;
}

// Each layer at one step: the rank and probability it gave the token taken, and its guesses, best first.
function lensTable(data, lens, step, encoder) {
  const layers = lens.rank[0].length;
  const guesses = lens.top_ids[0][0].length;
  const table = element("div", "lens-table");
  table.style.gridTemplateColumns = `max-content max-content repeat(${guesses}, max-content)`;
  table.append(element("span", "lens-head", ""), element("span", "lens-head", `'${data.next[step]}', taken`));
  const heading = element("span", "lens-head", "its guesses, best first");
  heading.style.gridColumn = `span ${guesses}`;
  table.append(heading);
  for (let layer = 0; layer < layers; layer++) {
    const rank = lens.rank[step][layer];
    const last = layer === layers - 1;
    const name = encoder ? `encoder layer ${layer + 1}${last ? " (the model's)" : ""}` : `layer ${layer + 1}${last ? " (output)" : ""}`;
    table.append(element("span", "lens-layer", name));
    const chosen = element("span", rank === 1 ? "lens-chosen top" : "lens-chosen",
      `rank ${rank.toLocaleString("en")} · ${number(lens.chosen_prob[step][layer])}`);
    chosen.title = `the rank and probability ${name} gave '${data.next[step]}'`;
    table.append(chosen);
    lens.top_ids[step][layer].forEach((id, i) => {
      const guess = element("span", id === data.chosen[step] ? "guess taken" : "guess");
      guess.append(element("span", "guess-token", lens.labels[id]), ` ${number(lens.top_probs[step][layer][i])}`);
      guess.title = `${lens.labels[id]}: ${number(lens.top_probs[step][layer][i])}`;
      table.append(guess);
    });
  }
  return table;
}

// Every step's column: the probability each layer gave that step's token; a column opens its step.
function lensStrip(data, lens, step, go, encoder) {
  const layers = lens.rank[0].length;
  const strip = element("div", "strip");
  strip.style.gridTemplateColumns = `max-content repeat(${data.steps}, minmax(0.9rem, 1.6rem))`;
  for (let layer = 0; layer < layers; layer++) {
    strip.append(element("div", "row-label", `${encoder ? "encoder " : "layer "}${layer + 1}`));
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
  return { strip, stripBox };
}

// One plain sentence for a class; how the lens reads a layer, for researchers, one click away.
function lensDetails(data, tuned) {
  const kl = data.tuned_lens?.kl;
  const measured = kl ? " Held out, the mean KL divergence from the output: " + kl[0].map((plain, layer) =>
    `layer ${layer + 1} ${number(plain)} nats with the logit lens, ${number(kl[1][layer])} with the tuned lens`).join("; ")
    + "." : "";
  const details = document.createElement("details");
  details.className = "lens-details";
  details.open = lensDetailsOpen; // kept open from step to step once opened
  details.addEventListener("toggle", () => { lensDetailsOpen = details.open; });
  details.append(element("summary", "lens-summary", "How the lens reads a layer"));
  details.append(element("p", "lens-note", tuned
    ? "Each early layer's output is first moved by an affine map fitted on a corpus so that the output layer reads it "
      + "as it reads the last layer's (the tuned lens, Belrose et al. 2023), then put through the final normalisation "
      + "and output layer. The maps are fitted, not the model: a guess here is what a layer's output holds in a form a "
      + "trained reader can find." + measured
    : "Each layer's output is put through the model's final normalisation and output layer as if it were the last (the "
      + "logit lens). Early layers need not use the output layer's basis, so the lens understates what they hold: read a "
      + "low probability there as 'not yet readable this way', not 'not yet known' (Belrose et al. 2023 fit a map per "
      + "layer, the tuned lens, for this" + (kl ? ": offered above for this checkpoint" : "") + ")." + measured));
  return details;
}

// The lens the view reads with goes into the address too (the server never hears of it: a link names it).
function writeLensToAddress(lens) {
  const url = new URL(window.location.href);
  if (lens === "tuned") url.searchParams.set("lens", "tuned");
  else url.searchParams.delete("lens");
  if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url);
}
