#!/bin/sh
# After the agent: structural checks, one row each on $RESULTS_FD. The exit status is the script's health only.
set -u
check() { assert "$@" >&"$RESULTS_FD" || true; }

# A gate: the module must exist at all.
check module-present --gate --exists "$AGENT_CWD/src/todos.js"
# Scored: the client names itself, as the service requires (the skill says how).
check sends-client-header --grep 'X-Todo-Client' "$AGENT_CWD/src/todos.js"
# A diagnostic (weight 0): shown, never scored. The peer's own command name works too.
gemba-trace assert documented --weight 0 --grep 'openTodos' "$AGENT_CWD/README.md" >&"$RESULTS_FD" || true

# A probe assert cannot express: the service preflight started still answers.
if node -e 'fetch(`http://127.0.0.1:${process.env.PORT}/health`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))'; then
  printf '%s\n' '{"test":"service-up","pass":true,"weight":0}' >&"$RESULTS_FD"
else
  printf '%s\n' '{"test":"service-up","pass":false,"weight":0,"message":"the todo service did not answer"}' >&"$RESULTS_FD"
fi
exit 0
