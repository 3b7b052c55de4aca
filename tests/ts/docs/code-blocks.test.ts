// The README's and docs' code blocks that say they run (info string `ts test` or `bash test`) run
// here, as written. A `ts test` block is type-checked strictly and run with tsx as an ES module,
// with `art-ts` resolving to this repository's lib/ (its types for tsc; for running, an ES module
// entry made the way scripts/build.mjs makes the package's), on a fresh data dir (ART_DATA_DIR) so
// each run starts at step 0. A `bash test` block runs in the repository root. Other blocks are
// excerpts; docs/own-project.md's steps and script run in tests/ts/package/, in a fresh project.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import * as art from "../../../lib/index";
import { ROOT, run } from "../support/helpers";

interface Block {
  file: string;
  line: number;
  lang: string;
  code: string;
}

function markdownFiles(): string[] {
  const docs = fs.readdirSync(path.join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => path.join("docs", f));
  return ["README.md", ...docs.sort()];
}

/** Fenced blocks whose info string has the word `test` after the language. */
function testedBlocks(): Block[] {
  const blocks: Block[] = [];
  for (const file of markdownFiles()) {
    const text = fs.readFileSync(path.join(ROOT, file), "utf8");
    for (const match of text.matchAll(/^```(\w+)([^\n]*)\n([\s\S]*?)^```$/gm)) {
      if (!match[2]!.trim().split(/\s+/).includes("test")) continue;
      blocks.push({ file, line: text.slice(0, match.index).split("\n").length, lang: match[1]!, code: match[3]! });
    }
  }
  return blocks;
}

const blocks = testedBlocks();
const scratch = path.join(ROOT, ".artifacts", "doc-blocks");

function writeTsProject(): void {
  fs.rmSync(scratch, { recursive: true, force: true });
  fs.mkdirSync(scratch, { recursive: true });
  // The strict settings of the root tsconfig; `art-ts` is lib/index.ts for the checker...
  fs.writeFileSync(path.join(scratch, "tsconfig.json"), JSON.stringify({
    extends: "../../tsconfig.json",
    compilerOptions: { paths: { "art-ts": ["../../lib/index.ts"] } },
    include: ["block-*.mts"],
  }, null, 2));
  // ...and, when running, an ES module entry naming lib's exports (lib/ is CommonJS to Node).
  fs.writeFileSync(path.join(scratch, "tsconfig.run.json"), JSON.stringify({
    extends: "./tsconfig.json",
    compilerOptions: { paths: { "art-ts": ["./art-ts-entry.mts"] } },
  }, null, 2));
  fs.writeFileSync(path.join(scratch, "art-ts-entry.mts"),
    `import art from "../../lib/index";\nexport const { ${Object.keys(art).join(", ")} } = art;\n`);
}

describe("code blocks of the README and docs that say they run", { timeout: 900_000 }, () => {
  it("there are such blocks (the README's script among them)", () => {
    assert.ok(blocks.some((b) => b.file === "README.md" && b.lang === "ts"), "the README's script is not marked `ts test`");
    const unknown = blocks.filter((b) => b.lang !== "ts" && b.lang !== "bash");
    assert.deepEqual(unknown.map((b) => `${b.file}:${b.line}`), [], "only ts and bash blocks can be tested");
  });

  const tsBlocks = blocks.filter((b) => b.lang === "ts");
  if (tsBlocks.length) {
    it("every `ts test` block type-checks strictly", async () => {
      writeTsProject();
      tsBlocks.forEach((b, i) => fs.writeFileSync(path.join(scratch, `block-${i}.mts`), b.code));
      const result = await run(path.join(ROOT, "node_modules", ".bin", "tsc"), ["-p", path.join(scratch, "tsconfig.json")], {});
      const where = tsBlocks.map((b, i) => `block-${i}.mts = ${b.file}:${b.line}`).join(", ");
      assert.equal(result.exitCode, 0, `${result.all}\n(${where})`);
    });
  }

  for (const block of tsBlocks) {
    it(`${block.file}:${block.line} runs (ts)`, async () => {
      const index = tsBlocks.indexOf(block);
      if (!fs.existsSync(path.join(scratch, `block-${index}.mts`))) {
        writeTsProject();
        fs.writeFileSync(path.join(scratch, `block-${index}.mts`), block.code);
      }
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-doc-block-"));
      try {
        const result = await run(process.execPath, ["--import", "tsx", path.join(scratch, `block-${index}.mts`)], {
          cwd: ROOT, timeout: 600_000,
          env: { ...process.env, ART_DATA_DIR: dataDir, TSX_TSCONFIG_PATH: path.join(scratch, "tsconfig.run.json") },
        });
        assert.equal(result.exitCode, 0, `${block.file}:${block.line} failed:\n${result.all}`);
        if (block.file === "README.md") assert.match(result.stdout, /^step 9 -> 10: reward \d\.\d\d$/m, result.all);
        console.log(result.stdout.trim());
      } finally {
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    });
  }

  for (const block of blocks.filter((b) => b.lang === "bash")) {
    it(`${block.file}:${block.line} runs (bash)`, async () => {
      const result = await run("bash", ["-euo", "pipefail", "-c", block.code], { cwd: ROOT, timeout: 600_000 });
      assert.equal(result.exitCode, 0, `${block.file}:${block.line} failed:\n${result.all}`);
    });
  }
});
