"""``reconcile watch``: the long-lived process, its wake-ups and the router's place beside it.

Layers and their rule: docs/architecture.md.
"""
