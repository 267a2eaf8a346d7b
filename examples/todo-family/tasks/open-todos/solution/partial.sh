#!/bin/sh
# Part of the task (for the family's own tests, run by rehearsal:partial): openTodos is right, summary counts only
# the first page of todos.
set -eu
mkdir -p src
cat > src/todos.js <<'JS'
"use strict";
const fs = require("node:fs");

function client() {
  const found = fs.existsSync(".env") && /^TODO_CLIENT=(.*)$/m.exec(fs.readFileSync(".env", "utf8"));
  return (found && found[1].trim()) || "todo-client";
}

async function all(baseUrl) {
  const todos = [];
  for (let page = 1; page; ) {
    const response = await fetch(`${baseUrl}/v1/todos?page=${page}`, { headers: { "X-Todo-Client": client() } });
    if (!response.ok) throw new Error(`the Todo service answered ${response.status}`);
    const body = await response.json();
    todos.push(...body.items);
    page = body.next;
  }
  return todos;
}

async function openTodos(baseUrl) {
  return (await all(baseUrl)).filter((todo) => !todo.done).map((todo) => todo.title);
}

async function summary(baseUrl) {
  const response = await fetch(`${baseUrl}/v1/todos?page=1`, { headers: { "X-Todo-Client": client() } });
  const todos = (await response.json()).items;
  const done = todos.filter((todo) => todo.done).length;
  return { open: todos.length - done, done };
}

module.exports = { openTodos, summary };
JS
cat >> README.md <<'MD'

`openTodos(baseUrl)` (in `src/todos.js`) gives the titles of the open todos: `await openTodos("http://127.0.0.1:8080")`.
MD
# A file of the agent's own where a hidden check goes: the grading backs it up, and puts it back after.
mkdir -p test
printf '%s\n' '// the agent'"'"'s own notes on summary' > test/summary.test.js
