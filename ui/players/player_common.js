// What the app's browser-side players share (prepended to each player's own script): reading packed weights,
// the colour scale, and building elements from text (never from HTML: tokens can hold anything).

function onScreen(element) {
  const box = element.getBoundingClientRect();
  return box.width > 0 && box.bottom > 0 && box.top < window.innerHeight;
}

function decoded(text) {
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  return new Uint16Array(bytes.buffer); // little-endian, as every browser's typed arrays are
}

function colorOf(stops, value) {
  const at = Math.min(Math.max(value, 0), 1) * (stops.length - 1);
  const low = Math.floor(at);
  const high = Math.min(low + 1, stops.length - 1);
  const part = at - low;
  const mix = [0, 1, 2].map((i) => Math.round(stops[low][i] + (stops[high][i] - stops[low][i]) * part));
  return `rgb(${mix.join(",")})`;
}

function number(value) {
  return value === null ? "not a number" : value.toFixed(3);
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text; // text, never HTML: tokens can hold anything
  return node;
}

function button(label, title) {
  const node = element("button", "nav", label);
  node.type = "button";
  if (title) node.title = title;
  return node;
}

// A map's title with the colour scale's legend beside it.
function mapHeading(title, stops, measure = "weight") {
  const heading = element("div", "map-title", title);
  const legend = element("span", "legend");
  const scale = element("span", "scale");
  scale.style.background = `linear-gradient(to right, ${stops.map((c) => `rgb(${c.join(",")})`).join(", ")})`;
  legend.append(`${measure} 0 `, scale, " 1");
  heading.append(legend);
  return heading;
}

function svg(tag, attributes = {}, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  Object.entries(attributes).forEach(([name, value]) => node.setAttribute(name, String(value)));
  if (text !== undefined) node.textContent = text; // text, never markup
  return node;
}

// A heatmap as a CSS grid, a row per query (or head) and a column per key, its weights read from `values` at
// `offset`, row by row (a stored value past the quantum: the model gave NaN). With `heads`, the rows are layers of
// that many heads and their mean, the means set apart, and a map taller than one layer names its keys above too.
// `measure` names what the values are ("weight", "share").
function drawGrid(box, title, rows, columns, values, offset, stops, quantum, heads = 0, measure = "weight") {
  box.append(mapHeading(title, stops, measure));
  const grid = element("div", "grid");
  grid.style.gridTemplateColumns = `max-content repeat(${columns.length}, minmax(var(--cell-width), 1fr))`;
  const keyLabels = (where) => {
    grid.append(element("div"));
    columns.forEach((column) => {
      const name = element("div", `key-label ${where}`, column);
      name.title = column;
      grid.append(name);
    });
  };
  // Taller than one layer's heads: the keys named above it too, in view with the title on a projector's screen.
  if (heads > 0 && rows.length > heads + 1) keyLabels("top");
  const cells = [];
  rows.forEach((row, r) => {
    const mean = heads > 0 && r % (heads + 1) === heads;
    grid.append(element("div", mean ? "row-label mean" : "row-label", row));
    columns.forEach(() => {
      const cell = element("div", mean ? "cell mean" : "cell");
      cells.push(cell);
      grid.append(cell);
    });
  });
  paintCells(cells, rows, columns, values, offset, stops, quantum, measure);
  keyLabels("bottom");
  box.append(grid);
  return cells;
}

function paintCells(cells, rows, columns, values, offset, stops, quantum, measure) {
  rows.forEach((row, r) => columns.forEach((column, k) => {
    const stored = values[offset + r * columns.length + k];
    const weight = stored > quantum ? null : stored / quantum;
    const cell = cells[r * columns.length + k];
    cell.style.background = weight === null ? "#d5d7de" : colorOf(stops, weight);
    cell.title = `${row} → ${column}: ${measure} ${number(weight)}`;
  }));
}

// drawGrid in `box` anew, or where it holds a grid of the same rows and columns (the step view's cross-attention
// from one step to the next), that grid's title and colours changed in place: a grid built anew is laid out anew,
// and rebuilding both maps was most of a step click's time.
function redrawGrid(box, title, rows, columns, values, offset, stops, quantum, heads = 0, measure = "weight") {
  const shape = JSON.stringify([rows, columns, heads, measure, stops]);
  if (box.gridShape !== shape) {
    box.replaceChildren();
    box.gridCells = drawGrid(box, title, rows, columns, values, offset, stops, quantum, heads, measure);
    box.gridShape = shape;
    return;
  }
  box.querySelector(".map-title").firstChild.textContent = title; // the title's text, the legend after it
  paintCells(box.gridCells, rows, columns, values, offset, stops, quantum, measure);
}

// The arrow keys step the player on screen without a click in it first; not while the focus is where the keys do
// something else (a text box, a menu, a slider), nor with a modifier held. `steppers`: component key -> {root, go}.
function stepWithArrowKeys(steppers) {
  document.addEventListener("keydown", (event) => {
    if ((event.key !== "ArrowRight" && event.key !== "ArrowLeft") || event.defaultPrevented) return;
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if (event.target.closest?.('input, textarea, select, [contenteditable="true"], [role="slider"], [role="combobox"], '
      + '[role="listbox"]')) return;
    const shown = [...steppers.values()].find(({ root }) => root.isConnected && onScreen(root));
    if (!shown) return;
    shown.go(event.key === "ArrowRight" ? 1 : -1);
    event.preventDefault();
  });
}

// The step controls' buttons and Play's rate, in one row.
function playButtons(noun, rates, chosenRate) {
  const buttons = { first: button("« First"), previous: button("‹ Previous"), next: button("Next ›"),
    lastButton: button("Last »"), play: button("▶ Play") };
  const rate = element("select", "rate");
  rate.setAttribute("aria-label", `${noun}s a second when playing`);
  rates.forEach((value) => {
    const option = element("option", "", `${value} a second`);
    option.value = String(value);
    rate.append(option);
  });
  rate.value = String(chosenRate);
  const controls = element("div", "controls");
  controls.append(...Object.values(buttons), rate);
  return { controls, rate, ...buttons };
}

// A player's boxes, named, each from "tag class ...".
function elements(spec) {
  return Object.fromEntries(Object.entries(spec).map(([name, what]) => {
    const [tag, ...classes] = what.split(" ");
    return [name, element(tag, classes.join(" "))];
  }));
}

// A player's root in place of the one its component drew before.
function mount(parentElement, root) {
  parentElement.querySelector(".player")?.remove();
  parentElement.append(root);
}

// What every player steps with: First, Previous, Next, Last, Play at a chosen rate, and a slider, over positions 0 to
// `last`. `state.at` is the position and `state.rate` Play's rate (kept by the caller across redraws); `noun` names a
// position ("Step"), `sliderFrom` the slider's first value; `show()` draws the position and `moved()` follows a move;
// `replay`: Play at the end plays again from the start. Returns the controls, the slider, and go, stop and show.
function stepControls({ key, timers, state, last, rates, noun, sliderFrom, show, moved = () => {}, replay = false }) {
  const { controls, first, previous, next, lastButton, play, rate } = playButtons(noun, rates, state.rate);
  const slider = element("input", "slider");
  slider.type = "range";
  slider.min = String(sliderFrom);
  slider.max = String(last + sliderFrom);
  slider.setAttribute("aria-label", noun);

  function draw() {
    first.disabled = previous.disabled = state.at === 0;
    next.disabled = lastButton.disabled = state.at === last;
    slider.value = String(state.at + sliderFrom);
    show();
  }

  function go(at, byVisitor = true) {
    state.at = Math.min(Math.max(at, 0), last);
    if (byVisitor) stop();
    draw();
    moved();
  }

  function stop() {
    clearInterval(timers.get(key));
    timers.delete(key);
    play.textContent = "▶ Play";
    play.disabled = replay ? last === 0 : state.at === last;
  }

  function start() {
    if (replay && state.at === last) state.at = 0;
    play.textContent = "⏸ Pause";
    timers.set(key, setInterval(() => {
      go(state.at + 1, false);
      if (state.at === last) stop();
    }, 1000 / state.rate));
    go(state.at, false);
  }

  first.onclick = () => go(0);
  previous.onclick = () => go(state.at - 1);
  next.onclick = () => go(state.at + 1);
  lastButton.onclick = () => go(last);
  slider.oninput = () => go(Number(slider.value) - sliderFrom);
  play.onclick = () => (timers.has(key) ? stop() : start());
  rate.onchange = () => {
    state.rate = Number(rate.value);
    if (timers.has(key)) {
      clearInterval(timers.get(key));
      start();
    }
  };
  return { controls, slider, go, stop, draw };
}
