// Exports a notebook to a standalone HTML page (nbconvert) whose charts draw without a Jupyter
// server: notebook outputs load plotly.js from the server that runs JupyterLab, so the page gets
// its own copy, once, in its <head>. Used by `npm run cookbook` and the browser test.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { ROOT, VENV_BIN, venvEnv } from "./project.mjs";

const require = createRequire(import.meta.url);

/** The plotly.js bundle as one script that also draws the charts queued before it ran. */
function plotlyScript() {
  const source = fs.readFileSync(require.resolve("plotly.js-dist-min/plotly.min.js"), "utf8")
    .replace(/<\/script/gi, "<\\/script").replace(/<!--/g, "<\\!--");
  return `<script>(function(){var d=window.define;window.define=undefined;\n${source}\n;window.define=d;` +
    `var q=window.__artPlotlyQueue||[];window.__artPlotlyQueue=[];q.forEach(function(f){f();});})();</script>`;
}

/**
 * Writes `<outDir>/<name>.html` from `notebook` (executing it first with `execute`); returns its
 * path. `env` is passed to nbconvert (and so to the kernel).
 */
export function exportHtml(notebook, outDir, { execute = false, env = {} } = {}) {
  fs.mkdirSync(outDir, { recursive: true });
  const args = ["nbconvert", "--to", "html", ...(execute ? ["--execute", "--ExecutePreprocessor.kernel_name=art-typescript"] : []),
    notebook, "--output-dir", outDir];
  const run = spawnSync(path.join(VENV_BIN, "jupyter"), args, { cwd: ROOT, env: venvEnv(env), encoding: "utf8" });
  if (run.status !== 0) throw new Error(`nbconvert --to html ${path.basename(notebook)} failed (exit ${run.status}):\n${run.stderr.slice(-3000)}`);
  const file = path.join(outDir, `${path.basename(notebook, ".ipynb")}.html`);
  const html = fs.readFileSync(file, "utf8");
  if (!html.includes("</head>")) throw new Error(`${file}: no </head> to put plotly.js before`);
  fs.writeFileSync(file, html.replace("</head>", () => `${plotlyScript()}\n</head>`));
  return file;
}
