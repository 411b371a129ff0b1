"""Ollama: probes, load/unload requests and answers (PURE). Never launched."""

from __future__ import annotations
