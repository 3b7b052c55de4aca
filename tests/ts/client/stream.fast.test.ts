// A training stream read by RemoteBackend.stream, against a plain HTTP server in this process: once
// the reader has stopped (an error line, a callback that threw), aborting the request later must not
// surface as an uncaught exception. (It did: the pipeline's stop aborted a stream already left, and
// the abort reached a Node stream nobody listened to, crashing a script about once in ten stops.)
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { RemoteBackend, StoppedError, TrainingStepError } from "../../../lib/index";

describe("RemoteBackend.stream", () => {
  let server: http.Server;
  let backend: RemoteBackend;
  const open = new Set<http.ServerResponse>();

  before(async () => {
    // Sends its lines and keeps the response open, as a server does while a step rolls back.
    server = http.createServer((request, response) => {
      response.writeHead(200, { "Content-Type": "application/x-ndjson" });
      const lines = request.url === "/error-line"
        ? [{ type: "start", from_step: 0, step: 1 }, { type: "error", status: 409, error: { message: "the step was rolled back", type: "conflict", code: "rolled_back" } }]
        : [{ type: "start", from_step: 0, step: 1 }];
      response.write(lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
      open.add(response);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    backend = new RemoteBackend({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: "t" });
  });
  after(async () => {
    for (const response of open) response.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  /** Runs `body` and returns the uncaught exceptions raised meanwhile and in the next 300 ms. */
  async function uncaughtDuring(body: () => Promise<void>): Promise<unknown[]> {
    const seen: unknown[] = [];
    const listener = (error: unknown) => seen.push(error);
    // node:test fails the running test on any uncaught exception; take them first to say which.
    const others = process.rawListeners("uncaughtException");
    process.removeAllListeners("uncaughtException");
    process.on("uncaughtException", listener);
    try {
      await body();
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      process.removeListener("uncaughtException", listener);
      for (const l of others) process.on("uncaughtException", l as (error: Error) => void);
    }
    return seen;
  }

  it("an abort after an error line ended the reading is not an uncaught exception", async () => {
    const seen = await uncaughtDuring(async () => {
      const controller = new AbortController();
      await assert.rejects(backend.stream("/error-line", {}, undefined, controller.signal),
        (e: unknown) => e instanceof TrainingStepError && /rolled back/.test(e.message));
      controller.abort(new DOMException("the training pipeline stopped", "AbortError"));
    });
    assert.deepEqual(seen.map(String), []);
  });

  it("an abort after a line callback threw is not an uncaught exception", async () => {
    const seen = await uncaughtDuring(async () => {
      const controller = new AbortController();
      await assert.rejects(backend.stream("/start-only", {}, () => { throw new Error("the callback broke"); }, controller.signal),
        /the callback broke/);
      controller.abort(new DOMException("the training pipeline stopped", "AbortError"));
    });
    assert.deepEqual(seen.map(String), []);
  });

  it("an abort while reading is a StoppedError", async () => {
    const controller = new AbortController();
    const reading = backend.stream("/start-only", {}, () => controller.abort(new DOMException("stop", "AbortError")), controller.signal);
    await assert.rejects(reading, (e: unknown) => e instanceof StoppedError);
  });
});
