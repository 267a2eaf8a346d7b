#!/bin/sh
# Before the agent: start the Todo service on $PORT (it runs until the grading ends; the harness stops it).
exec node "$HOOKS_DIR/service.js"
