"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");

// Bun would install a missing package on import, which would hide one this check exists to find: under Bun it skips.
test("package.json keeps no dependencies", { skip: typeof Bun !== "undefined" && "node only" }, () => {
  const manifest = JSON.parse(fs.readFileSync("package.json", "utf8"));
  assert.deepEqual(Object.keys(manifest.dependencies || {}), []);
});
