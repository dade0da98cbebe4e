"""The service layer: what a verb runs when it joins several packages (docs/design.md "Layers",
floor 10). Commands (floor 12) and lucepatch.api (11) call these; the packages below never do.
One module per family of verbs; each imports only what its verbs need, so a command pays at
start-up for its own verb only."""
