// A cell's last value as an `execute_result` bundle. An object with a rich representation says so
// the way Deno's Jupyter kernel reads it: a `[Symbol.for("Jupyter.display")]()` method returning a
// MIME bundle (the project's trajectories, tables and charts have one); anything else is
// `text/plain`, formatted as `console.log` would.
"use strict";
const util = require("node:util");

const DISPLAY = Symbol.for("Jupyter.display");

function resultBundle(value) {
  const text = util.inspect(value, { depth: 4, breakLength: 100 });
  if (value !== null && (typeof value === "object" || typeof value === "function") && typeof value[DISPLAY] === "function") {
    const bundle = value[DISPLAY]();
    if (bundle && typeof bundle === "object") return { "text/plain": text, ...bundle };
  }
  return { "text/plain": text };
}

module.exports = { resultBundle, DISPLAY };
