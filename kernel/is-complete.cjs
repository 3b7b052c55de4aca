// `is_complete_request`: complete, incomplete (the console waits for more lines, with an indent),
// or invalid (a syntax error before the end: running it cannot help). tslab answered `complete`
// for invalid code.
"use strict";

function isComplete(ts, code) {
  // Two blank lines at the end: the user wants it run as it is (the console's convention).
  if (/(^|\n)\s*\n\s*$/.test(code)) return { status: "complete" };
  const source = ts.createSourceFile("cell.ts", code, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const diagnostics = source.parseDiagnostics ?? [];
  if (!diagnostics.length) return { status: "complete" };
  const atEnd = diagnostics.every((d) => d.start >= code.trimEnd().length);
  if (atEnd) return { status: "incomplete", indent: indentAfter(code) };
  return { status: "invalid" };
}

/** The next line's indent: the last line's, one level deeper after an opening bracket. */
function indentAfter(code) {
  const last = code.split("\n").pop() ?? "";
  const indent = /^\s*/.exec(last)[0];
  return /[{[(]\s*$/.test(last) ? `${indent}  ` : indent;
}

module.exports = { isComplete };
