"""Task families on disk (docs/families.md): a folder of coding tasks and the skill set under test, graded by hook
scripts and a hidden test suite the agent never sees, in the layout of the peer's benchmark.

One concept a module: `layout` (what a family and a task are, found and validated before any agent runs),
`identity` (the skill-set hash, the hash of the staged `.claude/` tree, the family's revision), `environment` (the
`.env` files), `staging` (the agent's folder), `hooks` (preflight and invariants, confined), `rows` (the invariants'
rows as checks), `assertion` (the `assert` command hooks call), `hidden_tests` (the `tests/` tree: its checks,
staged and run) and `grading` (all of it, the score and the verdict).
"""
