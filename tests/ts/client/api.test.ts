// The public API's contract with a server (the rest, without one: wire.fast.test.ts): every failure
// an ArtError: answers this client cannot read, a connection that breaks mid-answer, and a server
// killed during a training step.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  ArtError, LocalBackend, RemoteBackend, ServerCrashedError, ServerProtocolError, ServerUnreachableError,
  TrainableModel, TrainingStepError, Trajectory,
} from "../../../lib/index";
import { ModelInfo } from "../../../lib/core/wire";

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
