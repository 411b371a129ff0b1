"""What a pass shows besides the plan: log lines and Prometheus metrics.

Layers and their rule: docs/architecture.md.
"""
