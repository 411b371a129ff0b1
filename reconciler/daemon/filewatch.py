"""Watching the manifest files (SHELL; the only module that imports watchfiles).

A change only means "reconcile soon": ``FileWatch`` calls ``notify()`` once
per debounced batch and says nothing about what changed, because every pass
re-reads everything (level-triggered).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Sequence

from reconciler.report import logs

#: watchfiles: yield once nothing changed for STEP ms, at the latest after DEBOUNCE ms.
FILE_STEP_MS = 50
FILE_DEBOUNCE_MS = 400
_MANIFEST_SUFFIXES = (".yaml", ".yml")


class FileWatch:
    """watchfiles on the manifest paths, in a daemon thread; calls ``notify()`` per batch."""

    def __init__(self, paths: Sequence[str], notify: Callable[[], None]) -> None:
        self._notify = notify
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.missing: list[str] = []
        for path in paths:
            path = os.path.abspath(path)
            if os.path.isdir(path):
                root, recursive, only = path, True, None
            elif os.path.exists(path):
                # A single file: watch its directory (editors replace files by rename).
                root, recursive, only = os.path.dirname(path), False, path
            else:
                self.missing.append(path)
                continue
            thread = threading.Thread(
                target=self._run, args=(root, recursive, only),
                name=f"reconciler-files:{path}", daemon=True,
            )
            self._threads.append(thread)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, root: str, recursive: bool, only: str | None) -> None:
        import watchfiles

        class _Manifests(watchfiles.DefaultFilter):
            def __call__(self, change, path: str) -> bool:
                if not super().__call__(change, path):
                    return False
                if only is not None:
                    return path == only
                base = os.path.basename(path)
                # Directories (no suffix) too: a removed or renamed folder of manifests.
                return base.endswith(_MANIFEST_SUFFIXES) or "." not in base or path == root

        try:
            for _changes in watchfiles.watch(
                root, watch_filter=_Manifests(), debounce=FILE_DEBOUNCE_MS, step=FILE_STEP_MS,
                stop_event=self._stop, rust_timeout=0, raise_interrupt=False,
                recursive=recursive,
            ):
                self._notify()
        except Exception:  # the watcher is a convenience; the resync timer remains
            logs.emit(f"watching {root} failed; relying on the resync timer",
                      level=logging.WARNING, exc_info=True)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
