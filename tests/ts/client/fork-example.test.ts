// examples/fork.ts runs as a user runs it (`npx tsx examples/fork.ts`), on builtin:tiny for a few
// steps: a trunk, two branches forked from its latest checkpoint, and the trunk going on.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT } from "../support/helpers";

describe("examples/fork.ts", () => {
  it("forks the trunk's checkpoint into two branches and trains each on", { timeout: 180_000 }, async () => {
    const args = ["--import", "tsx", path.join(ROOT, "examples", "fork.ts"), "--base-model", "builtin:tiny", "--lr", "1e-2", "--steps", "2", "--branch-steps", "1"];
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c) => (stdout += c));
      child.stderr.on("data", (c) => (stderr += c));
      child.on("exit", (code) => resolve({ code, stdout, stderr }));
    });
    assert.equal(run.code, 0, run.stderr.slice(-3000));
    assert.match(run.stdout, /^lr-half {4}from trunk@2, lr 0\.005: \d\.\d\d$/m, run.stdout);
    assert.match(run.stdout, /^lr-double {2}from trunk@2, lr 0\.02: \d\.\d\d$/m, run.stdout);
    assert.match(run.stdout, /^trunk {6}on from step 2, lr 0\.01: \d\.\d\d$/m, run.stdout);
  });
});
