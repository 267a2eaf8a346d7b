"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { base, todos, load } = require("./helpers.js");

test("openTodos gives every open todo's title, every page read", async () => {
  const expected = todos.filter((todo) => !todo.done).map((todo) => todo.title);
  assert.deepEqual(await load().openTodos(base()), expected);
});
