"""The run side: a case becomes a workspace, a conversation, evidence on disk, a verdict and a record.

session (what a pytest session decides once) · items (case files and items) · conversation (the scripted user
and a host) · evidence (what the conversation left). Where the agent acts — its folder, its sandbox, the log of its
commands — is `pytest_palette.arena`; the judge itself is `pytest_palette.judge`.
"""
