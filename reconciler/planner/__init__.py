"""Deciding: ``plan()`` and the rungs of its ladder, the memory ledger, restart policy,
generations, orphans, eviction, what the store remembers, and the plan as text or JSON.

Layers and their rule: docs/architecture.md.
"""
