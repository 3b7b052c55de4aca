// Which TypeScript line of a cell a frame of its compiled JavaScript belongs to, so an error's
// traceback points at the line the user wrote.
//
// tslab compiles a cell twice (TypeScript's watch program, then ts.transpileModule to CommonJS) and
// asks for no source maps; its TypeScript's exports are read-only, so neither compile can be told
// to write one. Instead each statement of the cell is marked with a comment naming its line
// (`/*@art:7*/`) before tslab compiles it: both compiles keep comments, so in the JavaScript that
// runs, the last marker before a frame's position names the statement it is in. Each cell's script
// is named `art-cell-<n>` (vm.runInThisContext's filename) so frames of errors thrown later, from
// callbacks a cell created, map too. Cost: a cell function's `toString()` shows the markers.
"use strict";
const vm = require("node:vm");

const CELL_FILE = /^art-cell-(\d+)$/;
const MARKER = /\/\*@art:(\d+)\*\//g;
const WRAPPERS = ["(async function(exports, require) { ", "(function(exports, require) { "];
const STATEMENT_PARENTS = new Set(["SourceFile", "Block", "ModuleBlock", "CaseClause", "DefaultClause"]);

function installCellLines(ts) {
  const cells = new Map(); // script name -> { count, source, lines: the script's lines }
  let executing = null; // { count, source, marked } of the cell being converted and run

  const runInThisContext = vm.runInThisContext;
  vm.runInThisContext = function (code, options) {
    const wrapper = typeof code === "string" ? WRAPPERS.find((w) => code.startsWith(w)) : undefined;
    if (wrapper && executing && code.includes("/*@art:")) {
      const filename = `art-cell-${executing.count}`;
      cells.set(filename, { count: executing.count, source: executing.source, lines: code.split("\n") });
      options = { ...(typeof options === "object" ? options : {}), filename };
    }
    return runInThisContext.call(this, code, options);
  };

  return {
    /** The cell's source with its statements marked; remembers the cell as the one executing. */
    mark(count, source) {
      const file = ts.createSourceFile("cell.ts", source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
      const starts = [];
      const visit = (node) => {
        const kind = ts.SyntaxKind[node.kind];
        const statement = (node.parent && STATEMENT_PARENTS.has(ts.SyntaxKind[node.parent.kind])) || kind.endsWith("Statement");
        if (statement && node.kind !== ts.SyntaxKind.EndOfFileToken && node.kind !== ts.SyntaxKind.Block) {
          starts.push(node.getStart(file));
        }
        ts.forEachChild(node, visit);
      };
      visit(file);
      const inserted = []; // { line, column, length } in the original source, for diagnostics
      let marked = "";
      let from = 0;
      for (const at of [...new Set(starts)].sort((a, b) => a - b)) {
        const { line, character } = file.getLineAndCharacterOfPosition(at);
        const marker = `/*@art:${line + 1}*/`;
        marked += source.slice(from, at) + marker;
        inserted.push({ line, column: character, length: marker.length });
        from = at;
      }
      marked += source.slice(from);
      executing = { count, source, inserted };
      return marked;
    },
    /** A diagnostic's position (0-based line and column) in the marked source, back in the cell the user wrote. */
    unmark(position) {
      let shift = 0;
      for (const m of (executing?.inserted ?? []).filter((i) => i.line === position.line)) {
        const at = m.column + shift; // where the marker sits in the marked line
        if (position.character < at + m.length) return { line: position.line, character: Math.min(position.character - shift, m.column) };
        shift += m.length;
      }
      return { line: position.line, character: position.character - shift };
    },
    /** `{ count, line, source }` (line 1-based in the cell) for a frame in a cell's script; null for other files. */
    original(file, line, column) {
      const cell = CELL_FILE.test(file) ? cells.get(file) : undefined;
      if (!cell) return null;
      // The wrapper's last line calls the cell's function: the kernel's frame, not the user's.
      if (line >= cell.lines.length) return { count: cell.count, line: null, source: cell.source, machinery: true };
      for (let row = line - 1; row >= 0; row--) {
        const text = row === line - 1 ? cell.lines[row].slice(0, column) : cell.lines[row];
        const markers = [...(text ?? "").matchAll(MARKER)];
        if (markers.length) return { count: cell.count, line: Number(markers[markers.length - 1][1]), source: cell.source };
      }
      return { count: cell.count, line: null, source: cell.source };
    },
  };
}

module.exports = { installCellLines };
