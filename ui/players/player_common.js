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
function mapHeading(title, stops) {
  const heading = element("div", "map-title", title);
  const legend = element("span", "legend");
  const scale = element("span", "scale");
  scale.style.background = `linear-gradient(to right, ${stops.map((c) => `rgb(${c.join(",")})`).join(", ")})`;
  legend.append("weight 0 ", scale, " 1");
  heading.append(legend);
  return heading;
}

function svg(tag, attributes = {}, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  Object.entries(attributes).forEach(([name, value]) => node.setAttribute(name, String(value)));
  if (text !== undefined) node.textContent = text; // text, never markup
  return node;
}
