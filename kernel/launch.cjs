#!/usr/bin/env node
// Starts the project's tslab kernel with the project root as its working folder.
//
// tslab compiles a cell and the local .ts files it imports relative to the kernel's working
// folder and refuses files outside it ("not under rootDir"). Jupyter starts a kernel in the
// notebook's folder, so notebooks in notebooks/ could not import lib/. Starting every kernel in
// the project root makes `import { ... } from "./lib"` resolve the same way in JupyterLab and in
// headless runs (nbclient / nbconvert).
"use strict";
const path = require("node:path");
const { installCompileTimers } = require("./compile-timers.cjs");
const { installCellLines } = require("./cell-lines.cjs");
const { startKernel } = require("./server.cjs");

const projectRoot = path.resolve(__dirname, "..");
const connectionArg = process.argv[2];
if (!connectionArg) {
  console.error("usage: launch.cjs <jupyter connection file>");
  process.exit(2);
}
const connectionFile = path.resolve(connectionArg); // before chdir: it may be relative
process.chdir(projectRoot);
process.env.ART_TS_KERNEL = "1";
process.env.ART_PROJECT_ROOT = projectRoot;

// Repairs of tslab 1.0 internals, each a no-op (with a line on stderr) if tslab changes.
const tslabDir = path.dirname(require.resolve("tslab/package.json"));
const ts = require(require.resolve("@tslab/typescript-for-tslab", { paths: [tslabDir] }));
if (!installCompileTimers(ts)) console.error("[art] kernel: tslab's compiler host changed; file changes between cells may break the kernel");
const lines = installCellLines(ts);
startKernel({ connectionFile, ts, lines }).catch((error) => {
  console.error("[art] kernel: could not start:", error);
  process.exit(1);
});
