"""The operating system's primitives the shell uses: running programs (the one ``subprocess``
owner), signals (the one ``signal`` owner), failpoints.

Layers and their rule: docs/architecture.md.
"""
