"""What the reconciler remembers: ``state.db`` (the one ``sqlite3`` owner), its schema steps,
and the lock (one writer at a time).

Layers and their rule: docs/architecture.md.
"""
