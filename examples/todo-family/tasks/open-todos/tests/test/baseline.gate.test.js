// A gate: the module is there and exports what the task asks for.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load } = require("./helpers.js");

test("src/todos.js exports openTodos and summary", () => {
  const todos = load();
  assert.equal(typeof todos.openTodos, "function");
  assert.equal(typeof todos.summary, "function");
});
