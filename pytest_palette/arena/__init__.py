"""Where an item's agent acts: the harness's side of the wall the hosts build on.

workspace (the item's folder) · sandbox (where each of the agent's commands runs) · command_log (the record of
those commands) · untrusted (reading what the agent left without following its links) · leftovers (what it left
running). Hosts and the run side both import these; nothing here imports either.
"""
