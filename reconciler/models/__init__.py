"""Model files on this node: hashing, stamps, containment, verification, per-pass checks.

Layers and their rule: docs/architecture.md.
"""
