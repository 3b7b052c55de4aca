// Numbers the docs take from runs agree with the committed runs (notebooks/results/*.json) and the
// notebooks' own defaults: the README's results table is generated (scripts/results-table.mjs), and
// notebooks/README.md's sizes and run times are checked here, so a stale number fails.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT, run } from "../support/helpers";

const RESULTS = path.join(ROOT, "notebooks", "results");
const COOKBOOK_README = fs.readFileSync(path.join(ROOT, "notebooks", "README.md"), "utf8");

/** The default values of a notebook's parameters cell (the first argument of notebookParams). */
function defaults(notebook: string): Map<string, number> {
  const cells = JSON.parse(fs.readFileSync(path.join(ROOT, "notebooks", `${notebook}.ipynb`), "utf8")).cells as Array<{ source: string[] | string }>;
  const source = cells.map((c) => (Array.isArray(c.source) ? c.source.join("") : c.source)).find((s) => s.includes("notebookParams({"));
  assert.ok(source, `${notebook}.ipynb has no notebookParams cell`);
  const object = source.slice(source.indexOf("notebookParams({"), source.indexOf("}, {", source.indexOf("notebookParams({")));
  return new Map([...object.matchAll(/(\w+):\s*(-?[\d.]+(?:e-?\d+)?)\b/g)].map((m) => [m[1]!, Number(m[2])]));
}

describe("numbers in the docs that come from runs", () => {
  it("the README's results table is what notebooks/results/*.json hold", async () => {
    const checked = await run(process.execPath, [path.join(ROOT, "scripts", "results-table.mjs"), "--check"]);
    assert.equal(checked.exitCode, 0, checked.all);
  });

  it("notebooks/README.md's sizes are the notebooks' defaults", () => {
    const rows = COOKBOOK_README.split("\n").filter((l) => /^\| `[\w-]+\.ipynb` \|/.test(l));
    assert.equal(rows.length, 6);
    for (const row of rows) {
      const [name, , cpuDefault] = row.split(" | ");
      const notebook = /`([\w-]+)\.ipynb`/.exec(row)![1]!;
      const values = new Set(defaults(notebook).values());
      // every size written as a numeral ("900 games", "16 RL steps x 4 x 6") is one of the defaults
      for (const m of cpuDefault!.matchAll(/(?<![\w.-])(\d+)(?![\w.-])/g)) {
        assert.ok(values.has(Number(m[1])), `${name}: ${m[1]} in "${cpuDefault}" is none of ${notebook}.ipynb's default parameters`);
      }
    }
  });

  it("notebooks/README.md's run times are the committed runs' range", () => {
    const runs = fs.readdirSync(RESULTS).filter((f) => f.endsWith(".json")).map((f) => JSON.parse(fs.readFileSync(path.join(RESULTS, f), "utf8")));
    const minutes = runs.map((r) => r.wallSeconds / 60);
    const said = /takes (\d+) to (\d+) minutes/.exec(COOKBOOK_README);
    assert.ok(said, "notebooks/README.md says how long a default run takes");
    assert.deepEqual([Number(said[1]), Number(said[2])], [Math.round(Math.min(...minutes)), Math.round(Math.max(...minutes))]);
  });

  it("the README's picture and its caption are the committed tictactoe run", () => {
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
    const result = JSON.parse(fs.readFileSync(path.join(RESULTS, "tictactoe.json"), "utf8"));
    const caption = /\*`tictactoe\.ipynb`'s training chart from its committed full run[\s\S]*?\*/.exec(readme)?.[0] ?? "";
    assert.match(caption, new RegExp(`from ${result.untrained.toFixed(2)} untrained to ${result.trained.toFixed(2)}`));
    assert.match(caption, new RegExp(`${Math.round(result.wallSeconds / 60)} minutes`));
    const html = fs.readFileSync(path.join(RESULTS, "tictactoe.html"), "utf8");
    const steps = /"x":\[([\d,]+)\],"y":\[[^\]]*\],"line":\{"color":"#ff7f0e","width":3\}/.exec(html)?.[1]?.split(",").length;
    assert.ok(caption.includes(`then ${steps} RL steps`), `the committed run's chart has ${steps} steps`);
  });
});
