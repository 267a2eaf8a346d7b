#!/bin/sh
# After the agent: structural checks, one row each on $RESULTS_FD. The exit status is the script's health only.
set -u
check() { assert "$@" >&"$RESULTS_FD" || true; }

check module-present --gate --exists "$AGENT_CWD/invoice.py"
# The skill's rules, read from the code: the one formatter, and no float anywhere near money.
check uses-format-cents --grep 'format_cents' "$AGENT_CWD/invoice.py"
check no-floats --not --grep '\bfloat\(|[0-9]\.[0-9]*\s*\*|/ *100\b' "$AGENT_CWD/invoice.py" \
  --message 'invoice.py computes money with floats'
# A diagnostic: shown, never scored.
check money-untouched --weight 0 --grep 'def format_cents' "$AGENT_CWD/money.py"
exit 0
