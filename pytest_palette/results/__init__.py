"""The results side: what a run's records say, read back from its ledger.

record (the one schema) · ledger (append, read, the latest of each item) · tally (records counted per case,
host and terms) · stats · report and compare (Markdown and JSON) · table (the terminal table) · redaction (what a
secret is, and the one scrub of every line that leaves a run). Nothing here knows how a run is held: it reads
records only.
"""
