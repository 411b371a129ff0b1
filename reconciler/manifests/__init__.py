"""Manifest bytes → a validated ``Fleet`` and this node's ``Desired``, or every problem with
``FILE:LINE: $.path``. Pure: the files are read by ``repo/``.

Layers and their rule: docs/architecture.md.
"""
