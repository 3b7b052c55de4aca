// The kernel's side of Jupyter's messaging protocol, over tslab's compiler and executor.
//
// tslab 1.0 (unmaintained since 2024) compiles and runs cells well, but its message handling left
// out what front ends rely on: no `status` in kernel_info_reply, a failed cell without ename,
// evalue, traceback or an `error` output (its error went to stderr), a cell's value printed to
// stdout instead of an `execute_result`, `is_complete` answering complete for invalid code, no
// history. This server answers the protocol as IPython's kernel does and calls tslab only for
// what it does well: `createConverter` (TypeScript to JavaScript), `createExecutor` (running a
// cell, told through the console it is given about a cell's value and errors), completion and
// inspection, and `lastWriteDisplayData` (where tslab's and lib/'s display helpers write).
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { Session, PROTOCOL_VERSION } = require("./wire.cjs");
const { History } = require("./history.cjs");
const { thrownError, compileError } = require("./errors.cjs");
const { resultBundle } = require("./values.cjs");
const { isComplete } = require("./is-complete.cjs");

const tslabDir = path.dirname(require.resolve("tslab/package.json"));
const tslabVersion = require("tslab/package.json").version;

// What tslab's kernel reported: committed notebooks store it, so keeping it leaves them unchanged on save.
const LANGUAGE_INFO = {
  name: "typescript", version: "3.7.2", mimetype: "text/typescript", file_extension: ".ts",
  codemirror_mode: { mode: "typescript", name: "javascript", typescript: true },
};

/**
 * The cells' converters, made on first use (tslab's ConverterSet shape). Each conversion's source
 * goes through `prepare` (the line markers) and its diagnostics to `onConvert`.
 */
function converterSet(createConverter, prepare, onConvert) {
  const made = {};
  const make = (isBrowser) => {
    const converter = createConverter({ isJS: false, isBrowser });
    const convert = converter.convert;
    converter.convert = (prevDecl, src) => {
      const result = convert.call(converter, prevDecl, prepare(src));
      onConvert(result);
      return result;
    };
    return converter;
  };
  return {
    get node() {
      return (made.node ??= make(false));
    },
    get browser() {
      return (made.browser ??= make(true));
    },
    close() {
      for (const c of Object.values(made)) c.close();
    },
  };
}

async function startKernel({ connectionFile, ts, lines }) {
  const connection = JSON.parse(fs.readFileSync(connectionFile, "utf8"));
  const session = new Session(connection.key, connection.signature_scheme);
  const zmq = require(require.resolve("zeromq", { paths: [tslabDir] }));
  const jupyter = require("tslab/dist/jupyter");
  const { createConverter } = require("tslab/dist/converter");
  const { createExecutor } = require("tslab/dist/executor");
  const { printQuickInfo } = require("tslab/dist/inspect");

  // What the executor tells about the cell it runs: its value (console.log) and its failure.
  let outcome = { value: undefined, hasValue: false, thrown: undefined, diagnostics: [] };
  let running = { count: 0, source: "" }; // the cell being executed
  const convs = converterSet(createConverter, (src) => (lines && src === running.source ? lines.mark(running.count, src) : src), (result) => {
    // Positions in the cell as written (the markers moved them); files the cell imports keep theirs.
    outcome.diagnostics = (result.diagnostics ?? []).map((d) => (d.fileName || !lines ? d : { ...d, start: lines.unmark(d.start) }));
  });
  convs.node; // warm the converter (several hundred ms) before the first cell
  const executor = createExecutor(process.cwd(), convs, {
    log: (value) => {
      outcome.value = value;
      outcome.hasValue = true;
    },
    error: (first, ...rest) => {
      if (typeof first === "string" && first.startsWith("%s%d:%d")) return; // a diagnostic: read from the conversion
      outcome.thrown = { value: first, rest };
    },
  });

  const iopub = new zmq.Publisher();
  const shell = new zmq.Router();
  const control = new zmq.Router();
  const stdin = new zmq.Router();
  const heartbeat = new zmq.Reply();
  const address = (port) => `${connection.transport}://${connection.ip}:${port}`;
  await Promise.all([
    iopub.bind(address(connection.iopub_port)), shell.bind(address(connection.shell_port)),
    control.bind(address(connection.control_port)), stdin.bind(address(connection.stdin_port)),
    heartbeat.bind(address(connection.hb_port)),
  ]);

  // Sends from several tasks are queued per socket: a zeromq socket takes one send at a time.
  const sending = new Map();
  const send = (socket, frames) => {
    const next = (sending.get(socket) ?? Promise.resolve()).then(() => socket.send(frames)).catch((error) => {
      process.stderr.write(`[art] kernel: a message could not be sent: ${error}\n`);
    });
    sending.set(socket, next);
    return next;
  };
  const reply = (socket, request, type, content) => send(socket, session.frames(type, content, request, { identities: request.identities }));
  const publish = (request, type, content) => send(iopub, session.frames(type, content, request));
  const status = (request, state) => publish(request, "status", { execution_state: state });

  const history = new History();
  let executionCount = 0;
  let queue = Promise.resolve();
  // A cell that fails with stop_on_error aborts the executes received before its failure (queued
  // behind it, as a Run All sends them), not those sent after it: requests are numbered as received.
  let received = 0;
  let abortThrough = 0;

  async function execute(socket, request, number) {
    const { code = "", silent = false, store_history = !silent, stop_on_error = true } = request.content;
    if (number <= abortThrough) {
      await status(request, "busy");
      // As ipykernel answers it: no execution count, so front ends leave the cell's prompt empty.
      await reply(socket, request, "execute_reply", { status: "aborted" });
      await status(request, "idle");
      return;
    }
    await status(request, "busy");
    const count = store_history ? ++executionCount : executionCount;
    if (!silent) await publish(request, "execute_input", { code, execution_count: count });
    // Output goes to the cell that runs; later output (a timer, a training loop's callback) to the
    // last cell run, as tslab and IPython do.
    const stream = (name) => (chunk, encoding, callback) => {
      const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString(typeof encoding === "string" ? encoding : "utf8");
      if (!silent) publish(request, "stream", { name, text });
      if (typeof encoding === "function") encoding();
      else if (typeof callback === "function") callback();
      return true;
    };
    process.stdout.write = stream("stdout");
    process.stderr.write = stream("stderr");
    jupyter.lastWriteDisplayData = (data, update) => {
      if (!silent) publish(request, update ? "update_display_data" : "display_data", data);
    };
    // lib/'s clearOutput() (IPython's clear_output); tslab has none.
    jupyter.lastClearOutput = (wait) => {
      if (!silent) publish(request, "clear_output", { wait: Boolean(wait) });
    };
    running = { count, source: code };
    outcome = { value: undefined, hasValue: false, thrown: undefined, diagnostics: [] };
    let ok = false;
    try {
      ok = await executor.execute(code);
    } catch (error) {
      outcome.thrown = { value: error, rest: [] };
    }
    let content;
    let shown = null;
    if (ok) {
      if (outcome.hasValue && !silent) {
        const data = resultBundle(outcome.value);
        shown = data["text/plain"];
        await publish(request, "execute_result", { execution_count: count, data, metadata: {} });
      }
      content = { status: "ok", execution_count: count, payload: [], user_expressions: {} };
    } else {
      const error = outcome.diagnostics.length ? compileError(outcome.diagnostics, count, code)
        : outcome.thrown ? thrownError(outcome.thrown.value, lines)
        : { ename: "Error", evalue: "the cell failed", traceback: ["the cell failed"] };
      if (!silent) await publish(request, "error", error);
      content = { status: "error", execution_count: count, ...error };
      if (stop_on_error) {
        // Requests already sent sit in the socket while the cell compiled and ran (it blocks the event
        // loop): let the receiving loop number them first, as ipykernel flushes its queue on an error.
        for (let turn = 0; turn < 3; turn++) await new Promise((resolve) => setImmediate(resolve));
        abortThrough = received;
      }
    }
    if (store_history) history.add(count, code, shown);
    await reply(socket, request, "execute_reply", content);
    await status(request, "idle");
  }

  const handlers = {
    kernel_info_request: (socket, request) => reply(socket, request, "kernel_info_reply", {
      status: "ok", protocol_version: PROTOCOL_VERSION, implementation: "art-ts (tslab)", implementation_version: tslabVersion,
      language_info: LANGUAGE_INFO, banner: `TypeScript ${ts.version} (art-ts, over tslab ${tslabVersion})`,
    }),
    execute_request: (socket, request) => {
      const number = ++received;
      queue = queue.then(() => execute(socket, request, number)).catch((error) => {
        process.stderr.write(`[art] kernel: an execute request failed: ${error?.stack ?? error}\n`);
      });
      return queue;
    },
    is_complete_request: (socket, request) => reply(socket, request, "is_complete_reply", isComplete(ts, request.content.code ?? "")),
    complete_request: (socket, request) => {
      const info = executor.complete(request.content.code, request.content.cursor_pos);
      return reply(socket, request, "complete_reply", {
        status: "ok", matches: info.candidates, cursor_start: info.start, cursor_end: info.end, metadata: {},
      });
    },
    inspect_request: (socket, request) => {
      const info = executor.inspect(request.content.code, request.content.cursor_pos);
      return reply(socket, request, "inspect_reply", info
        ? { status: "ok", found: true, data: { "text/plain": printQuickInfo(info) }, metadata: {} }
        : { status: "ok", found: false, data: {}, metadata: {} });
    },
    history_request: (socket, request) => reply(socket, request, "history_reply", history.reply(request.content)),
    comm_info_request: (socket, request) => reply(socket, request, "comm_info_reply", { status: "ok", comms: {} }),
    interrupt_request: (socket, request) => {
      executor.interrupt();
      return reply(socket, request, "interrupt_reply", { status: "ok" });
    },
    shutdown_request: async (socket, request) => {
      await reply(socket, request, "shutdown_reply", { status: "ok", restart: Boolean(request.content.restart) });
      // Exit: LocalBackend's exit hook (and the server's --parent-pid watch) stop the gpu-server with it.
      setTimeout(() => process.exit(0), 50);
    },
  };

  async function serve(socket) {
    for await (const frames of socket) {
      let request;
      try {
        request = session.parse(frames);
      } catch (error) {
        process.stderr.write(`[art] kernel: dropped a message: ${error.message}\n`);
        continue;
      }
      const type = request.header.msg_type;
      const handler = handlers[type];
      if (type === "execute_request") {
        handler(socket, request); // busy and idle bracket the execution itself (it may wait in the queue)
        continue;
      }
      (async () => {
        await status(request, "busy");
        try {
          if (handler) await handler(socket, request);
          else process.stderr.write(`[art] kernel: unknown message type ${type}\n`);
        } catch (error) {
          process.stderr.write(`[art] kernel: ${type} failed: ${error?.stack ?? error}\n`);
        } finally {
          await status(request, "idle");
        }
      })();
    }
  }
  serve(shell);
  serve(control);
  (async () => {
    for await (const frames of heartbeat) await heartbeat.send(frames);
  })();

  // Kernel > Interrupt sends SIGINT (the kernelspec's default interrupt mode).
  process.on("SIGINT", () => executor.interrupt());
  // A rejected promise or a throw in a callback must not end the kernel: it goes to the last cell's stderr.
  process.on("uncaughtException", (error) => console.error("Uncaught exception:", error));
  process.on("unhandledRejection", (reason) => console.error("Unhandled promise rejection:", reason));
}

module.exports = { startKernel };
