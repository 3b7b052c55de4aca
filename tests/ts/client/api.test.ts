// The public API's contract: camelCase names converted to and from the wire in one place (your
// metric names untouched), every bad option a ConfigurationError naming the call, the option and
// the nearest name, and every failure an ArtError: answers this client cannot read, a connection
// that breaks mid-answer, and a server killed during a training step.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { metricNameToWire, metricsFromWire, sftConfigToWire, trainConfigToWire } from "../../../lib/core/convert";
import {
  ArtError, checkTrainOptions, ConfigurationError, LocalBackend, Model, nearestName, RemoteBackend, retry, rulerScoreGroup,
  ServerCrashedError, ServerProtocolError, ServerUnreachableError, TrainableModel, TrainingStepError, Trajectory, TrajectoryGroup,
} from "../../../lib/index";
import { ModelInfo } from "../../../lib/core/wire";

/** The ConfigurationError `run` throws (it must throw one). */
async function configurationError(run: () => unknown): Promise<string> {
  try {
    await run();
  } catch (error) {
    assert.ok(error instanceof ConfigurationError, `${(error as Error).name}: ${(error as Error).message}`);
    return error.message;
  }
  throw new Error("no ConfigurationError");
}

describe("names between the API and the wire", () => {
  it("renames the server's metrics to camelCase and leaves your metric names as you gave them", () => {
    const row = metricsFromWire({
      reward_std: 0.5, grad_norm: 1, tokenize_s: 0.1, groups_skipped_by_reason: { equal_rewards: 2 },
      illegal_moves: 0.25, myScore: 3, win: 1,
    });
    assert.deepEqual(row, { rewardStd: 0.5, gradNorm: 1, tokenizeSeconds: 0.1, groupsSkippedByReason: { equalRewards: 2 }, illegal_moves: 0.25, myScore: 3, win: 1 });
    assert.equal(metricNameToWire("rewardStd"), "reward_std");
    assert.equal(metricNameToWire("illegal_moves"), "illegal_moves");
    assert.equal(metricNameToWire("myScore"), "myScore");
  });

  it("sends the configs in snake_case, enum values included", () => {
    assert.deepEqual(trainConfigToWire({ learningRate: 1e-3, klCoef: 0.1, importanceSampling: "sequence", maxSequenceLength: 512,
      samplerCorrection: "none", samplerCorrectionCap: 3, lengthNormalization: "none", klRefStep: 2 }),
    { learning_rate: 1e-3, kl_coef: 0.1, importance_sampling: "sequence", max_sequence_length: 512, sampler_correction: "none",
      sampler_correction_cap: 3, length_normalization: "none", kl_ref_step: 2 });
    assert.deepEqual(sftConfigToWire({ batchSize: 4, trainOn: "lastAssistant", warmupRatio: 0 }),
      { batch_size: 4, train_on: "last_assistant", warmup_ratio: 0 });
  });
});

describe("sampled choices", () => {
  const completion = (logprob: number | null) => ({
    id: "c", object: "chat.completion", created: 0, model: "m", prompt_token_ids: [1, 2],
    choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "hi", refusal: null },
      token_ids: [7], logprobs: { content: [{ token: "hi", logprob, bytes: [], top_logprobs: [] }] }, art_provenance: "art1:f:s:sig" }],
  }) as never;

  it("keep the server's provenance tag and send it back when training", () => {
    const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }] }).push(completion(-0.5));
    const wire = t.toWire().messages_and_choices[1] as Record<string, unknown>;
    assert.equal(wire.art_provenance, "art1:f:s:sig");
    assert.deepEqual([wire.token_ids, wire.logprobs], [[7], [-0.5]]);
  });

  it("without finite logprobs say so, not that token ids are missing", () => {
    assert.throws(() => new Trajectory().push(completion(null)), /has 1 token ids but logprobs that are not all finite numbers/);
  });
});

describe("options", () => {
  it("an unknown option names the call and the nearest valid name", async () => {
    assert.equal(nearestName("learning_rate", ["learningRate", "loss"]), "learningRate");
    assert.equal(nearestName("concurency", ["concurrency", "progress"]), "concurrency");
    assert.equal(nearestName("zzz", ["concurrency", "progress"]), undefined);
    assert.match(await configurationError(() => checkTrainOptions("model.train", { kl_coef: 0.1 })),
      /^model\.train: unknown option `kl_coef`; did you mean `klCoef`\?/);
    assert.match(await configurationError(() => new TrainableModel({ name: "a", project: "b", lora: { target_modules: ["q_proj"] } } as never)),
      /^new TrainableModel: unknown option `lora\.target_modules`; did you mean `targetModules`\? \(valid: r, alpha, dropout, targetModules\)$/);
    assert.match(await configurationError(() => retry(async () => 1, { attempt: 2 } as never)), /^retry: unknown option `attempt`; did you mean `attempts`\?/);
  });

  it("numbers are range-checked and types checked, every problem in one line", async () => {
    const message = await configurationError(() => checkTrainOptions("model.train", { learningRate: 0, microBatchSize: 2.5, temperature: Infinity, loss: "dpo" }));
    assert.equal(message.split("\n").length, 1);
    for (const part of ["option `learningRate` must be > 0 (got 0)", "option `microBatchSize` must be an integer (got 2.5)",
      "option `temperature` must be a finite number (got Infinity)", 'option `loss` must be one of "ppo", "cispo" (got "dpo")']) {
      assert.ok(message.includes(part), `${part} not in: ${message}`);
    }
    assert.match(await configurationError(() => new TrainableModel({ name: "has space", project: "p" })), /option `name` must be 1-64 letters/);
    assert.match(await configurationError(() => new RemoteBackend({ url: "localhost:8000", token: "t" })), /option `url` must be an http\(s\) URL/);
    assert.match(await configurationError(() => new Model({ name: "" })), /^new Model: option `name` must not be empty/);
    assert.match(await configurationError(() => LocalBackend.start({ startupTimeoutMs: 5 })), /option `startupTimeoutMs` must be >= 1000 \(got 5\)/);
    assert.match(await configurationError(() => rulerScoreGroup(new TrajectoryGroup([]), { judge: "gpt" as never })), /option `judge` must be a model/);
    assert.match(await configurationError(() => checkTrainOptions("model.train", "fast")), /^model\.train: options must be an object \(got "fast"\)$/);
  });
});

describe("failures are ArtErrors", () => {
  let server: http.Server;
  let url = "";
  before(async () => {
    // A stand-in for answers the real server never gives: they cannot be produced otherwise.
    server = http.createServer((request, response) => {
      if (request.url === "/not-json") return void response.end("<html>proxy error</html>");
      if (request.url === "/wrong-shape") return void response.end(JSON.stringify({ name: 1 }));
      if (request.url === "/bad-line") return void response.end('{"type": "progress", "gradient_step": "x"}\n');
      if (request.url === "/error-line") {
        return void response.end('{"type": "start", "from_step": 0, "step": 1}\n' +
          '{"type": "error", "status": 422, "error": {"message": "the loss is nan; the step was rolled back", "code": "non_finite"}}\n');
      }
      if (request.url === "/cut") {
        response.write('{"type": "start", "from_step": 0, "step": 1}\n');
        return void setTimeout(() => request.socket.destroy(), 50);
      }
      response.statusCode = 404;
      response.end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  it("an answer this client cannot read is a ServerProtocolError; a broken connection a ServerUnreachableError", async () => {
    const backend = new RemoteBackend({ url, token: "t" });
    await assert.rejects(backend.request("GET", "/not-json", ModelInfo), (e) => e instanceof ServerProtocolError && /is not JSON/.test(e.message));
    await assert.rejects(backend.request("GET", "/wrong-shape", ModelInfo), (e) => e instanceof ServerProtocolError && /same version\?/.test(e.message));
    await assert.rejects(backend.stream("/bad-line", {}), (e) => e instanceof ServerProtocolError);
    await assert.rejects(backend.stream("/error-line", {}), (e) => e instanceof TrainingStepError && e.status === 422 &&
      e.code === "non_finite" && /rolled back/.test(e.message));
    await assert.rejects(backend.stream("/cut", {}), (e) => e instanceof ServerUnreachableError && /broke while reading \/cut/.test(e.message));
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const nobody = new RemoteBackend({ url: `http://127.0.0.1:${port}`, token: "t" });
    await assert.rejects(nobody.request("GET", "/health", ModelInfo), (e) => e instanceof ServerUnreachableError && /ECONNREFUSED/.test(e.message));
  });

  it("a connection that breaks during a step says whether the server saved the step or rolled it back", { timeout: 120_000 }, async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-api-"));
    const local = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    // A proxy between the client and the real server that breaks the client's connection once a step's
    // progress line has passed: at once (the server sees the client leave), or once the server has sent
    // its whole answer (the server committed; the client never reads the result).
    let mode: "pass" | "cut" | "cut after the answer" = "pass";
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(new URL(local.url).port), "127.0.0.1");
      client.pipe(upstream);
      let progressed = false;
      upstream.on("data", (data: Buffer) => {
        const text = data.toString();
        if (!progressed) client.write(data);
        progressed ||= mode !== "pass" && text.includes('"progress"');
        if (progressed && (mode === "cut" || text.includes('"result"'))) {
          client.destroy();
          upstream.destroy();
        }
      });
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    try {
      const backend = new RemoteBackend({ url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token: local.token });
      const model = new TrainableModel({ name: "broken", project: "api-tests", baseModel: "builtin:tiny" });
      await model.register(backend);
      const conversation = { messages: [{ role: "user" as const, content: "hi" }, { role: "assistant" as const, content: "hello there" }] };
      mode = "cut";
      await assert.rejects(model.trainSft(Array.from({ length: 8 }, () => conversation), { epochs: 1000, batchSize: 1, progress: false }),
        (e) => e instanceof ServerUnreachableError && /rolled the step back: the model is still at step 0; train again/.test(e.message));
      mode = "cut after the answer";
      await assert.rejects(model.trainSft([conversation], { epochs: 1, progress: false }),
        (e) => e instanceof ServerUnreachableError && /saved the step before the connection broke: the model is at step 1/.test(e.message));
      mode = "pass";
      assert.equal(await model.getStep(), 1);
    } finally {
      proxy.close();
      await local.close();
    }
  });

  it("a server killed during a training step is a ServerCrashedError with its log, not a raw TypeError", { timeout: 120_000 }, async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-api-"));
    const backend = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    const model = new TrainableModel({ name: "killed", project: "api-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const conversation = { messages: [{ role: "user" as const, content: "hi" }, { role: "assistant" as const, content: "hello there" }] };
    let progressSeen = false;
    const training = model.trainSft(Array.from({ length: 8 }, () => conversation), {
      epochs: 1000, batchSize: 1, progress: false, onEvent: (event) => {
        if (event.type === "progress" && !progressSeen) {
          progressSeen = true;
          process.kill(backend.pid!, "SIGKILL");
        }
      },
    });
    await assert.rejects(training, (error: unknown) => {
      assert.ok(error instanceof ServerCrashedError, `${(error as Error).name}: ${(error as Error).message}`);
      assert.ok(error instanceof ArtError);
      assert.match(error.message, /died \(SIGKILL\).*log/s);
      return true;
    });
    await assert.rejects(model.getStep(), ServerCrashedError);
    const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }] });
    assert.throws(() => t.push(null as never), /trajectory\.push takes a message or a chat completion \(got null\)/);
  });
});
