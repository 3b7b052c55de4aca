// The kernel's input history since it started, answering `history_request` (tail, range, search) as
// IPython's kernel does: entries are [session, line, input] or [session, line, [input, output]].
// tslab keeps none; JupyterLab's console (up-arrow) and %history-like front ends ask for it.
"use strict";

const SESSION = 1; // one kernel process is one session (IPython numbers its sessions in a database)

class History {
  constructor() {
    this.entries = []; // { line, input, output }
  }

  /** Stores an executed cell under its execution count; `output` is its text/plain result, if any. */
  add(line, input, output) {
    this.entries.push({ line, input, output: output ?? null });
  }

  /** The `history_reply` content for a request's content. */
  reply(request) {
    const type = request.hist_access_type ?? "tail";
    let entries = this.entries;
    if (type === "tail") {
      entries = request.n > 0 ? entries.slice(-request.n) : entries;
    } else if (type === "range") {
      // Only this session's inputs exist; `stop` is exclusive, as in IPython.
      if (request.session !== undefined && request.session !== SESSION && request.session !== 0) entries = [];
      const start = request.start ?? 0;
      const stop = request.stop ?? Number.POSITIVE_INFINITY;
      entries = entries.filter((e) => e.line >= start && e.line < stop);
    } else if (type === "search") {
      const pattern = globPattern(request.pattern ?? "*");
      entries = entries.filter((e) => pattern.test(e.input));
      if (request.unique) {
        // The latest of equal inputs is kept, in order.
        const seen = new Set();
        entries = entries.slice().reverse().filter((e) => !seen.has(e.input) && seen.add(e.input)).reverse();
      }
      if (request.n > 0) entries = entries.slice(-request.n);
    } else {
      return { status: "error", ename: "ValueError", evalue: `unknown hist_access_type ${JSON.stringify(type)}`, traceback: [], history: [] };
    }
    return {
      status: "ok",
      history: entries.map((e) => [SESSION, e.line, request.output ? [e.input, e.output] : e.input]),
    };
  }
}

/** IPython's history search pattern: a glob (`*`, `?`) matched against the whole input. */
function globPattern(glob) {
  const source = glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[\\s\\S]*").replace(/\?/g, "[\\s\\S]");
  return new RegExp(`^${source}$`);
}

module.exports = { History };
