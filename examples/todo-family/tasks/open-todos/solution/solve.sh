#!/bin/sh
# The reference solution: run in the agent's folder, it does what the task asks.
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
  const todos = await all(baseUrl);
  const done = todos.filter((todo) => todo.done).length;
  return { open: todos.length - done, done };
}

module.exports = { openTodos, summary };
JS
cat >> README.md <<'MD'

`openTodos(baseUrl)` (in `src/todos.js`) gives the titles of the open todos: `await openTodos("http://127.0.0.1:8080")`.
MD
