"""Drive a pure exchange with scripted answers (no sockets)."""

from __future__ import annotations

from reconciler.runtimes.common import ErrorKind, Exchange, ProbeAnswer, ProbeRequest

REFUSED = ProbeAnswer(error=ErrorKind.REFUSED, error_detail="connection refused")
TIMEOUT = ProbeAnswer(error=ErrorKind.TIMEOUT, error_detail="within 1s")


def ok(body: object, status: int = 200) -> ProbeAnswer:
    return ProbeAnswer(status=status, body=body, latency=0.001)


def drive(
    exchange: Exchange, script: dict[str, ProbeAnswer]
) -> tuple[dict[str, ProbeAnswer], list[ProbeRequest]]:
    """Answer each yielded request from ``script`` (missing paths: refused)."""
    sent: list[ProbeRequest] = []
    try:
        batch = next(exchange)
        while True:
            sent.extend(batch)
            batch = exchange.send(tuple(script.get(r.path, REFUSED) for r in batch))
    except StopIteration as done:
        return done.value, sent
