// The generated reference stays true: docs/api/ (TypeDoc over lib/index.ts), docs/openapi.json
// (the server's routes) and lib/core/openapi.gen.ts (the types generated from it) equal a fresh
// render, every public name has a page, and an exported name without a TSDoc comment fails the
// build (`npm run docs`).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import * as art from "../../../lib/index";
import { ROOT, run } from "../support/helpers";

describe("the API reference and the OpenAPI file", { timeout: 300_000 }, () => {
  it("are current: `node scripts/docs.mjs --check` renders them afresh and finds no difference", async () => {
    const result = await run(process.execPath, [path.join(ROOT, "scripts", "docs.mjs"), "--check"], { cwd: ROOT });
    assert.equal(result.exitCode, 0, result.all);
  });

  it("has a page for every name the package exports", () => {
    const index = fs.readFileSync(path.join(ROOT, "docs", "api", "README.md"), "utf8");
    const linked = new Set([...index.matchAll(/\]\((?:classes|functions|interfaces|type-aliases|variables)\/([^)]+)\.md\)/g)].map((m) => m[1]));
    const missing = Object.keys(art).filter((name) => !linked.has(name));
    assert.deepEqual(missing, []);
    const openapi = JSON.parse(fs.readFileSync(path.join(ROOT, "docs", "openapi.json"), "utf8")) as { paths: Record<string, unknown> };
    for (const route of ["/v1/chat/completions", "/v1/models", "/v1/art/models/register", "/v1/art/models/{name}/train"]) assert.ok(route in openapi.paths, route);
  });

  it("fails the build on an exported name without a comment", async () => {
    const dir = path.join(ROOT, ".artifacts", "typedoc-probe");
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, "probe.ts"), "/** Documented. */\nexport const documented = 1;\nexport function undocumentedProbe(): void {}\n");
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({ extends: "../../tsconfig.json", include: ["probe.ts"] }));
    // The project's TypeDoc settings, over the probe file.
    fs.writeFileSync(path.join(dir, "typedoc.json"), JSON.stringify({ extends: ["../../typedoc.json"], entryPoints: ["probe.ts"], tsconfig: "tsconfig.json", out: "out" }));
    const result = await run(process.execPath, [path.join(ROOT, "node_modules", "typedoc", "bin", "typedoc"), "--options", path.join(dir, "typedoc.json")], { cwd: ROOT });
    assert.notEqual(result.exitCode, 0, result.all);
    assert.match(result.all, /undocumentedProbe.*does not have any documentation/);
    assert.doesNotMatch(result.all, /documented \(Variable\).*does not have/);
  });
});
