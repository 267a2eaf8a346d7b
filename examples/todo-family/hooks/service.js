// The Todo service the family's tasks talk to (.claude/skills/todo-service/SKILL.md), on $PORT.
// Started by preflight.sh: it forks the server, waits until it listens, and exits 0 (1 when it cannot start).
"use strict";
const http = require("node:http");
const { fork } = require("node:child_process");
const todos = require("./todos.json");
const PAGE = 3;

if (process.argv[2] !== "serve") {
  const server = fork(__filename, ["serve"], { stdio: ["ignore", "ignore", "inherit", "ipc"] });
  const timer = setTimeout(() => {
    console.error("the todo service did not listen within 10 s");
    process.exit(1);
  }, 10000);
  server.on("message", (said) => {
    if (said === "listening") {
      clearTimeout(timer);
      server.disconnect();
      server.unref();
      process.exit(0);
    }
  });
  server.on("exit", (code) => {
    console.error(`the todo service exited ${code} before it listened`);
    process.exit(1);
  });
} else {
  const server = http.createServer((request, response) => {
    const url = new URL(request.url, "http://127.0.0.1");
    const send = (status, body) => {
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(body));
    };
    if (url.pathname === "/health") return send(200, { ok: true });
    if (url.pathname !== "/v1/todos") return send(404, { error: "no such path" });
    if (!request.headers["x-todo-client"]) return send(401, { error: "name your client: X-Todo-Client" });
    const page = Number(url.searchParams.get("page") || "1");
    if (!Number.isInteger(page) || page < 1) return send(400, { error: "page is a number from 1" });
    const items = todos.slice((page - 1) * PAGE, page * PAGE);
    send(200, { items, next: page * PAGE < todos.length ? page + 1 : null });
  });
  server.listen(Number(process.env.PORT), "127.0.0.1", () => process.send("listening"));
}
