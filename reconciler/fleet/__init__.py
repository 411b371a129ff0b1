"""Every node's offline plan from the manifests alone (``reconcile fleet``, ``plan --offline``)
and what a revision changes on which node (§10).

Layers and their rule: docs/architecture.md.
"""
