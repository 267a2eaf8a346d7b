// Support for the hidden checks: staged with them, never graded.
"use strict";
const path = require("node:path");

exports.base = () => `http://127.0.0.1:${process.env.PORT}`;
exports.todos = require("./todos.json");
exports.load = () => require(path.resolve("src/todos.js"));
