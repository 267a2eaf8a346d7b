"""The run side: a case becomes a workspace, a conversation, evidence on disk, a verdict and a record.

session (what a pytest session decides once) · items (case files and items) · workspace (an item's folder) ·
conversation (the scripted user and a host) · evidence (what the conversation left) · leftovers (what a failed
one left running). The judge itself is `pytest_palette.judge`.
"""
