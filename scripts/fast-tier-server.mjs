#!/usr/bin/env node
// The server command of the fast tier (`node scripts/test.mjs --fast` sets ART_SERVER_COMMAND to it):
// a test there must start no server, so starting one fails with the line LocalBackend shows.
console.error("art-server: configuration error: a test of the fast tier (*.fast.test.ts) started the server: " +
  "rename its file to *.test.ts, or test without a server");
process.exit(78);
