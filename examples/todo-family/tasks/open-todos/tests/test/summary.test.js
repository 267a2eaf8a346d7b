"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { base, todos, load } = require("./helpers.js");

test("summary counts the open and the done todos", async () => {
  const done = todos.filter((todo) => todo.done).length;
  assert.deepEqual(await load().summary(base()), { open: todos.length - done, done });
});
