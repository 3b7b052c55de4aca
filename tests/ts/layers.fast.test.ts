// lib/'s folders are layers (see lib/index.ts): a file imports only from its own folder or from a
// layer below it, so a change to the client never drags in a notebook helper. Read from the
// sources with TypeScript's own import scanner; the package test proves the public names.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { ROOT } from "./support/helpers";

// Bottom to top; folders on one rank are siblings and do not import each other.
const LAYERS: Record<string, number> = { core: 0, display: 1, capture: 1, client: 2, integrations: 3, notebook: 4 };
const LIB = path.join(ROOT, "lib");

function libFiles(): string[] {
  return fs.readdirSync(LIB, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".ts")).map((f) => f.split(path.sep).join("/")).sort();
}

function relativeImports(file: string): string[] {
  const info = ts.preProcessFile(fs.readFileSync(path.join(LIB, file), "utf8"), true, true);
  return info.importedFiles.map((i) => i.fileName).filter((name) => name.startsWith("."));
}

test("every lib file sits in a layer folder (only index.ts at the top)", () => {
  const stray = libFiles().filter((f) => f !== "index.ts" && !(f.split("/")[0]! in LAYERS && f.split("/").length === 2));
  assert.deepEqual(stray, [], `move these into one of ${Object.keys(LAYERS).join(", ")}`);
});

test("imports point only down or within a folder", () => {
  const violations: string[] = [];
  for (const file of libFiles().filter((f) => f !== "index.ts")) {
    const from = file.split("/")[0]!;
    for (const spec of relativeImports(file)) {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), spec));
      const to = target.split("/")[0]!;
      if (to === from) continue;
      if (!(to in LAYERS)) violations.push(`${file} imports ${spec} (outside the layers)`);
      else if (LAYERS[to]! >= LAYERS[from]!) violations.push(`${file} (${from}) imports ${spec} (${to}: not below)`);
    }
  }
  assert.deepEqual(violations, []);
});

// The door names what it exports (tests/ts/public-api.fast.test.ts lists the names): a new file is
// not public by existing, and the wire's snake_case schemas stay behind it.
test("index.ts exports by name, never a whole file, and nothing of the wire's form", () => {
  const source = fs.readFileSync(path.join(LIB, "index.ts"), "utf8");
  assert.doesNotMatch(source, /export \* from/, "export the public names of a file by name");
  const exported = new Set(relativeImports("index.ts").map((spec) => `${path.posix.normalize(spec)}.ts`));
  assert.deepEqual(["core/convert.ts", "core/wire.ts", "client/rollout-runner.ts"].filter((f) => exported.has(f)), [],
    "the wire form and the rollout runner are internal");
});

test("the checker sees a wrong import (so the rule above can fail)", () => {
  const info = ts.preProcessFile('import { notice } from "../notebook/params";\nexport * from "./x";', true, true);
  assert.deepEqual(info.importedFiles.map((i) => i.fileName), ["../notebook/params", "./x"]);
});
