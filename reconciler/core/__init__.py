"""The vocabulary every layer shares: values that cross module boundaries, units, errors,
exit codes, labels, loopback addresses. Lowest layer; imports nothing else of the package.

Layers and their rule: docs/architecture.md.
"""
