"""The manifests checkout as files: reading them, its git commit, a revision's files.

Layers and their rule: docs/architecture.md.
"""
