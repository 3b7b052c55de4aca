// The framework examples (examples/frameworks/*.ts) run as a user runs them (`npx tsx <file>`), on
// builtin:tiny for one step: each starts its server and the towns MCP server, runs its agent inside
// model.rollout for 2 questions x 4 rollouts, trains a step and prints it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT } from "../support/helpers";

const EXAMPLES = ["openai", "ai-sdk", "agents-sdk", "anthropic", "langgraph"];

function runExample(name: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "examples", "frameworks", `${name}.ts`)], {
      cwd: ROOT, env: { ...process.env, ART_BASE_MODEL: "builtin:tiny", ART_STEPS: "1" }, stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => (stdout += c));
    child.stderr.on("data", (c) => (stderr += c));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("examples/frameworks", () => {
  it("each framework's example trains one step on its captured rollouts", { timeout: 300_000 }, async () => {
    const runs = await Promise.all(EXAMPLES.map(runExample));
    runs.forEach((run, i) => {
      const name = EXAMPLES[i]!;
      assert.equal(run.code, 0, `${name}: exit ${run.code}\n${run.stderr.slice(-3000)}`);
      // Every rollout made at least one model call and it was captured (a step with no sampled choice would be refused).
      assert.match(run.stdout, new RegExp(`${name}-agent step 0 -> 1: reward \\d\\.\\d{3}, tool used \\d\\.\\d{2}, model calls per rollout [1-9]\\.\\d`), `${name}: ${run.stdout}`);
    });
  });
});
