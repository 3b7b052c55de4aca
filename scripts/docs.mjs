#!/usr/bin/env node
// `npm run docs`: the API reference and the server's OpenAPI schema, both committed under docs/.
//
//   node scripts/docs.mjs            render docs/api/ (TypeDoc, Markdown) and write docs/openapi.json
//   node scripts/docs.mjs --check    render into a scratch folder and fail when the committed copies differ
//
// TypeDoc reads the TSDoc comments of everything lib/index.ts exports (typedoc.json); an exported
// name without a comment fails the build. The schema comes from the server's routes without
// starting it (gpu-server/art_server/api/openapi.py).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT, VENV_PYTHON, venvEnv } from "./project.mjs";

const API_DIR = path.join(ROOT, "docs", "api");
const OPENAPI_FILE = path.join(ROOT, "docs", "openapi.json");
const check = process.argv.includes("--check");

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { cwd: ROOT, encoding: "utf8", ...options });
  if (result.status !== 0) {
    process.stderr.write(`${result.stdout ?? ""}${result.stderr ?? ""}`);
    console.error(`[docs] FAILED: ${path.basename(command)} ${args.join(" ")} (exit ${result.status ?? result.signal})`);
    process.exit(1);
  }
  return result.stdout;
}

function renderApi(out) {
  fs.rmSync(out, { recursive: true, force: true });
  run(process.execPath, [path.join(ROOT, "node_modules", "typedoc", "bin", "typedoc"), "--options", "typedoc.json", "--out", out, "--logLevel", "Warn"],
    { stdio: ["ignore", "pipe", "pipe"] });
}

function openapiText() {
  return run(VENV_PYTHON, ["-m", "art_server.api.openapi"], { env: venvEnv() });
}

/** Every file under `dir`, relative, sorted. */
function files(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((f) => fs.statSync(path.join(dir, f)).isFile()).map((f) => f.split(path.sep).join("/")).sort();
}

if (check) {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "art-docs-"));
  try {
    renderApi(path.join(scratch, "api"));
    const fresh = files(path.join(scratch, "api"));
    const committed = files(API_DIR);
    const stale = [
      ...fresh.filter((f) => !committed.includes(f)).map((f) => `docs/api/${f} is missing`),
      ...committed.filter((f) => !fresh.includes(f)).map((f) => `docs/api/${f} is no longer generated`),
      ...fresh.filter((f) => committed.includes(f) &&
        fs.readFileSync(path.join(scratch, "api", f), "utf8") !== fs.readFileSync(path.join(API_DIR, f), "utf8")).map((f) => `docs/api/${f} differs`),
    ];
    if (!fs.existsSync(OPENAPI_FILE) || fs.readFileSync(OPENAPI_FILE, "utf8") !== openapiText()) stale.push("docs/openapi.json differs from the server's routes");
    if (stale.length) {
      console.error(`[docs] out of date (run \`npm run docs\` and commit the result):\n  ${stale.slice(0, 20).join("\n  ")}` +
        (stale.length > 20 ? `\n  ... ${stale.length - 20} more` : ""));
      process.exit(1);
    }
    console.log(`[docs] docs/api (${fresh.length} files) and docs/openapi.json are current`);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
} else {
  renderApi(API_DIR);
  fs.writeFileSync(OPENAPI_FILE, openapiText());
  console.log(`[docs] docs/api: ${files(API_DIR).length} files; docs/openapi.json written`);
}
