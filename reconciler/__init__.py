"""reconciler: make the machine's local LLM inference servers match YAML manifests."""

__version__ = "0.1.0"
