// A failed cell as Jupyter shows errors: `ename`, `evalue` and a traceback whose frames name the
// cell and its TypeScript line ("Cell In[3], line 7", as IPython writes them), with that line quoted.
"use strict";
const util = require("node:util");

const RED = "\u001b[0;31m";
const GREEN = "\u001b[0;32m";
const RESET = "\u001b[0m";
const FRAME = /^(\s*at (?:async )?)(?:(.*?) \()?(.+?):(\d+):(\d+)\)?$/;
// Frames of the kernel's own machinery, below the user's code: not shown.
const MACHINERY = /(^node:|[\\/]node_modules[\\/]tslab[\\/]|[\\/]kernel[\\/][^\\/]+\.cjs$|^evalmachine\.<anonymous>$)/;
const INTERRUPTED = /^(Interrupted asynchronously|Script execution was interrupted by `SIGINT`)/;

/** The content of an `error` message (and of a failed `execute_reply`) for a thrown value. */
function thrownError(value, lines) {
  if (value instanceof Error && INTERRUPTED.test(value.message)) {
    return { ename: "KeyboardInterrupt", evalue: "the cell was interrupted (Kernel > Interrupt); the kernel keeps its variables", traceback: [`${RED}KeyboardInterrupt${RESET}: the cell was interrupted`] };
  }
  if (!(value instanceof Error)) {
    const evalue = util.inspect(value);
    return { ename: "Uncaught", evalue, traceback: [`${RED}Uncaught${RESET} ${evalue} (a value was thrown that is not an Error)`] };
  }
  const ename = value.name || value.constructor?.name || "Error";
  const evalue = value.message;
  const frames = [];
  const quoted = [];
  for (const line of String(value.stack ?? "").split("\n").slice(1)) {
    const match = FRAME.exec(line);
    if (!match) continue;
    const [, at, fn, file, row, column] = match;
    const cell = lines?.original(file, Number(row), Number(column));
    if (cell?.machinery) continue;
    if (cell) {
      const where = cell.line ? `Cell In[${cell.count}], line ${cell.line}` : `Cell In[${cell.count}]`;
      frames.push(`${at}${fn ? `${fn} (${where})` : where}`);
      if (cell.line && quoted.length < 3 && !quoted.some((q) => q.where === where)) quoted.push({ where, text: excerpt(cell.source, cell.line, where) });
    } else if (!MACHINERY.test(file)) {
      frames.push(line);
    }
  }
  const head = `${RED}${ename}${RESET}: ${evalue}`;
  // As IPython orders them: the outermost call first, the line that threw last, then the error.
  return { ename, evalue, traceback: [...quoted.reverse().map((q) => q.text), head, ...frames] };
}

/** A cell that did not compile: TypeScript's diagnostics (tslab's converter's shape) as one error. */
function compileError(diagnostics, count, source) {
  const located = diagnostics.map((d) => {
    const where = d.fileName ? `${d.fileName}:${d.start.line + 1}:${d.start.character + 1}` : `Cell In[${count}], line ${d.start.line + 1}`;
    return { where, message: `${d.messageText}${d.code ? ` (TS${d.code})` : ""}`, d };
  });
  const first = located[0];
  return {
    ename: "TSError",
    evalue: first ? `${first.where}: ${first.message}` : "the cell did not compile",
    traceback: [
      `${RED}TSError${RESET}: the cell did not compile (${located.length} error${located.length === 1 ? "" : "s"})`,
      ...located.flatMap(({ where, message, d }) => [
        `${where}: ${message}`,
        ...(d.fileName ? [] : [excerpt(source, d.start.line + 1, where, d.start.character)]),
      ]),
    ],
  };
}

/** IPython's excerpt: the line with an arrow (and a caret under `column`), and the lines around it. */
function excerpt(source, line, where, column) {
  const lines = source.split("\n");
  const last = Math.min(lines.length, line + 2);
  const width = String(last).length;
  const out = [`${GREEN}${where}${RESET}`];
  for (let n = Math.max(1, line - 2); n <= last; n++) {
    const arrow = n === line ? `${GREEN}---->${RESET}` : "     ";
    out.push(`${arrow} ${String(n).padStart(width)} ${lines[n - 1]}`);
    if (n === line && column !== undefined) out.push(`${" ".repeat(5 + 1 + width + 1 + column)}${RED}^${RESET}`);
  }
  return out.join("\n");
}

module.exports = { thrownError, compileError };
