"""Observing and acting on the servers and processes of this machine: probes, the process
table, spawning, stopping, exposure, post-mortems, instance directories, server logs.

Layers and their rule: docs/architecture.md.
"""
