"""One module per command group: ``run…(args) -> int`` (SHELL)."""
