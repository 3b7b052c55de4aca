#!/usr/bin/env node
// A small MCP server over stdio (written with @modelcontextprotocol/sdk): a gazetteer of made-up
// towns that no model can know, so an agent has to call its tools to answer. Two tools:
// `list_towns` and `lookup_town`. The data is fixed (a seeded generator), so answers are checkable.
// Used by notebooks/bring-your-own-agent.ipynb, examples/ and the tests.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { TOWNS } from "./towns-data.mjs";

const server = new McpServer({ name: "towns", version: "1.0.0" });
const byName = new Map(TOWNS.map((town) => [town.name.toLowerCase(), town]));

server.registerTool("list_towns", {
  description: "Lists the names of all towns in the gazetteer.",
  inputSchema: {},
}, async () => ({ content: [{ type: "text", text: TOWNS.map((t) => t.name).join(", ") }] }));

server.registerTool("lookup_town", {
  description: "Looks up a town by name: its population and the year it was founded.",
  inputSchema: { name: z.string().describe("The town's name, e.g. Brindlemoor") },
}, async ({ name }) => {
  const town = byName.get(String(name).trim().toLowerCase());
  if (!town) return { content: [{ type: "text", text: `No town named ${JSON.stringify(name)}. Call list_towns for the names.` }], isError: true };
  return { content: [{ type: "text", text: `${town.name}: population ${town.population}, founded ${town.founded}.` }] };
});

await server.connect(new StdioServerTransport());
