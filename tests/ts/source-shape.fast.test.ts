// The shape of the sources: no file over 400 lines unless its header says why ("Over 400 lines:
// ..." in its first lines), and no import circle between the files of one folder (a circle means
// two files are one concept, or a third is missing). Read from the files git tracks.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { ROOT } from "./support/helpers";

const MAX_LINES = 400;
const HEADER_LINES = 40;
const GENERATED = new Set(["lib/core/openapi.gen.ts"]);  // written by `npm run docs` from the server's schema

function trackedSources(): string[] {
  const files = execFileSync("git", ["ls-files", "-z"], { cwd: ROOT, encoding: "utf8" }).split("\0");
  return files.filter((f) => /\.(ts|mts|mjs|cjs|py)$/.test(f) && !GENERATED.has(f) && fs.existsSync(path.join(ROOT, f))).sort();
}

test("no source file is over 400 lines without a reason in its header", () => {
  const long = trackedSources().flatMap((file) => {
    const lines = fs.readFileSync(path.join(ROOT, file), "utf8").split("\n");
    const n = lines.length - (lines.at(-1) === "" ? 1 : 0);
    if (n <= MAX_LINES) return [];
    return lines.slice(0, HEADER_LINES).some((l) => /Over 400 lines: \S/.test(l)) ? [] : [`${file} (${n} lines)`];
  });
  assert.deepEqual(long, [], "split these by concern, or say in the header why not (\"Over 400 lines: ...\")");
});

/** The files of the same folder that `file` imports (relative imports, types included). */
function sameFolderImports(file: string, source: string): string[] {
  const dir = path.posix.dirname(file);
  if (file.endsWith(".py")) {
    const names = [...source.matchAll(/^\s*from \.([A-Za-z_]\w*)(?:\.\w+)* import /gm)].map((m) => m[1]!);
    for (const m of source.matchAll(/^\s*from \. import \(?([\w\s,]+)\)?/gm)) names.push(...m[1]!.split(",").map((n) => n.trim().split(/\s+/)[0]!).filter(Boolean));
    return names.map((n) => `${dir}/${n}.py`);
  }
  return ts.preProcessFile(source, true, true).importedFiles.map((i) => i.fileName)
    .filter((spec) => spec.startsWith("./") && !spec.slice(2).includes("/"))
    .map((spec) => `${dir}/${spec.slice(2).replace(/\.(m?[jt]s|cjs)$/, "")}`);
}

function importEdges(): Map<string, string[]> {
  const files = trackedSources();
  const key = (f: string) => f.replace(/\.(ts|mts|mjs|cjs)$/, "");
  const known = new Set(files.map(key));
  const edges = new Map<string, string[]>();
  for (const file of files) {
    const targets = sameFolderImports(file, fs.readFileSync(path.join(ROOT, file), "utf8")).map(key).filter((t) => known.has(t) && t !== key(file));
    edges.set(key(file), [...new Set(targets)]);
  }
  return edges;
}

/** Each circle of `edges` (file -> the files it imports), as "a -> b -> a". */
function findCircles(edges: Map<string, string[]>): string[] {
  const circles = new Set<string>();
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (node: string): void => {
    state.set(node, "open");
    stack.push(node);
    for (const next of edges.get(node) ?? []) {
      if (state.get(next) === "open") circles.add([...stack.slice(stack.indexOf(next)), next].join(" -> "));
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of edges.keys()) if (!state.has(node)) visit(node);
  return [...circles];
}

test("no import circle between the files of one folder", () => {
  assert.deepEqual(findCircles(importEdges()), []);
});

test("the circle check finds a circle (it is not blind)", () => {
  assert.deepEqual(sameFolderImports("a/x.py", "from .y import z\nfrom . import w, v as u\n"), ["a/y.py", "a/w.py", "a/v.py"]);
  assert.deepEqual(sameFolderImports("a/x.ts", 'import type { Y } from "./y";\nimport { Z } from "../z";\n'), ["a/y"]);
  assert.deepEqual(findCircles(new Map([["a/x", ["a/y"]], ["a/y", ["a/z"]], ["a/z", ["a/x"]], ["a/w", ["a/x"]]])), ["a/x -> a/y -> a/z -> a/x"]);
});
