import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatProgress, inNotebook, plotlyHtml, ProgressLine, tableHtml, tableText } from "../../lib/index";

/** Runs `fn` with process.stdout.write captured; returns what it wrote, chunk by chunk. */
function captureStdout(fn: () => void): string[] {
  const chunks: string[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string) => chunks.push(chunk) > 0) as typeof process.stdout.write;
  try {
    fn();
  } finally {
    process.stdout.write = write;
  }
  return chunks;
}

describe("display helpers outside a notebook", () => {
  it("know they are not in a kernel", () => {
    assert.equal(inNotebook(), false);
  });

  it("format a progress line with a bar, a count and a percentage", () => {
    assert.equal(formatProgress("rollouts", { done: 5, total: 10, detail: "reward 0.50" }, 10), "rollouts [#####-----] 5/10 50% reward 0.50");
    assert.equal(formatProgress("steps", { done: 3 }), "steps 3");
    assert.equal(formatProgress("over", { done: 12, total: 10 }, 4), "over [####] 12/10 100%");
  });

  it("print a progress line at most once per interval in log mode, and always the final state", () => {
    const lines = captureStdout(() => {
      const progress = new ProgressLine("work", { mode: "log", logIntervalMs: 60_000 });
      for (let i = 1; i <= 100; i++) progress.update({ done: i, total: 100 });
      progress.finish({ done: 100, total: 100 });
      progress.finish({ done: 100, total: 100 });
    });
    assert.deepEqual(lines, ["work [--------------------] 1/100 1%\n", "work [####################] 100/100 100%\n"]);
  });

  it("rewrite one terminal line with a carriage return in tty mode", () => {
    const chunks = captureStdout(() => {
      const progress = new ProgressLine("tty", { mode: "tty", minIntervalMs: 0 });
      progress.update({ done: 1, total: 2 });
      progress.finish({ done: 2, total: 2 });
    });
    assert.equal(chunks.length, 2);
    assert.ok(chunks.every((c) => c.startsWith("\r\x1b[2K")));
    assert.ok(chunks[1]?.endsWith("\n") && !chunks[0]?.endsWith("\n"));
  });

  it("render records and danfo-shaped frames as aligned text and escaped HTML", () => {
    const rows = [{ step: 1, reward: 0.25, note: "<b>" }, { step: 10, reward: 1, note: "ok" }];
    assert.equal(tableText(rows), ["step  reward  note", "----  ------  ----", "   1   0.250  <b>", "  10       1  ok"].join("\n"));
    assert.match(tableHtml(rows), /<td>&lt;b&gt;<\/td>/);
    const frame = { columns: ["a", "b"], values: [[1, 2], [3, 4]] };
    assert.equal(tableText(frame, { maxRows: 1 }), ["a  b", "-  -", "1  2", "... 1 more rows"].join("\n"));
  });

  it("embed plotly.js in the HTML fallback only when asked, with script-safe data", () => {
    const figure = { data: [{ type: "scatter", y: [1, 2], name: "</script><b>" }] };
    const first = plotlyHtml(figure, "fig-1", true);
    const later = plotlyHtml(figure, "fig-2", false);
    assert.match(first, /plotly\.js v\d/);
    assert.doesNotMatch(later, /plotly\.js v\d/);
    assert.ok(!later.includes("</script><b>"), "data must not close the script tag");
    assert.match(later, /Plotly\.newPlot\("fig-2"/);
  });
});
