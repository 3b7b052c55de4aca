// bestStep: early stopping's pick from the history rows, the same pick the server's
// deleteCheckpoints makes (highest, the earliest of equal ones), and a clear error for a bad `by`.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bestStep, ConfigurationError, type HistoryRow } from "../../../lib/index";

const rows: HistoryRow[] = [
  { step: 0, split: "val", reward: 0.1, win: 0.2 },
  { step: 0, split: "train", reward: 0.9, win: 0.9 },
  { step: 1, split: "val", reward: 0.5, win: 0.8 },
  { step: 2, split: "val", reward: 0.7, win: 0.8 },
  { step: 3, split: "val", reward: 0.3 },
  { step: 3, split: "test", reward: 2, win: true },
];

describe("bestStep", () => {
  it("picks the highest row of the split, the earliest of equal ones", () => {
    assert.deepEqual(bestStep(rows), { step: 2, value: 0.7 }, "val/reward is the default; train rows do not count");
    assert.deepEqual(bestStep(rows, "val/win"), { step: 1, value: 0.8 }, "a tie goes to the earlier step; a row without the metric is skipped");
    assert.deepEqual(bestStep(rows, "test/win"), { step: 3, value: 1 }, "a boolean counts as 0 or 1");
  });

  it("says undefined when no row has the metric, and refuses a `by` that is not split/metric", () => {
    assert.equal(bestStep(rows, "val/missing"), undefined);
    assert.equal(bestStep([], "val/reward"), undefined);
    assert.throws(() => bestStep(rows, "win"), (e: Error) => e instanceof ConfigurationError && /bestStep: .*split\/metric/.test(e.message));
  });
});
