"""The status page: a ``Snapshot`` → HTML (PURE; BEHAVIOUR §11; the only module that imports jinja2).

Everything the page shows comes from ``snapshot.Snapshot`` (the values
``status --json``, ``plan --json``'s ledger and ``events --json`` print), and
all of it is untrusted text (role names, log lines, exit reasons): the
environment autoescapes every value, and nothing is marked safe but the
package's own stylesheet.

The page has no inline script and no style attribute, so a strict
Content-Security-Policy holds (``csp()``): the one ``<style>`` block is
allowed by its hash, the script is a file (``page.js``, served from a path),
and the memory bars are SVG rectangles whose widths are attributes. Without
JavaScript it is a plain page that reloads itself (``<noscript>`` meta
refresh); with it, ``page.js`` swaps in the new ``#live`` part when the
daemon publishes a pass and follows a role's log.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from importlib import resources
from typing import Any

import attrs
import jinja2
import markupsafe

from reconciler.core.units import format_size
from reconciler.planner.memoryview import MemoryBar

#: The width of a bar in SVG user units (``viewBox="0 0 1000 …"``).
BAR_UNITS = 1000.0
#: Seconds between reloads of a page shown without JavaScript.
REFRESH = 10

_TEMPLATES = resources.files("reconciler.report") / "templates"
STYLE = (_TEMPLATES / "page.css").read_text(encoding="utf-8")
SCRIPT = (_TEMPLATES / "page.js").read_text(encoding="utf-8")
SCRIPT_PATH = "/status/page.js"


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def csp() -> str:
    """The Content-Security-Policy of the served page: nothing inline but the hashed style."""
    return ("default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self'; "
            f"style-src 'sha256-{_digest(STYLE)}'; base-uri 'none'; form-action 'self'; "
            "frame-ancestors 'none'")


@attrs.frozen(kw_only=True)
class Segment:
    """One role's rectangle in a bar, in bar units."""

    role: str
    held: int
    x: float
    width: float
    hue: int
    evictable: bool
    observed_width: float | None  # the role's real use (RSS), when known


@attrs.frozen(kw_only=True)
class DrawnBar:
    name: str
    budget: int | None
    held: int
    budget_x: float | None
    segments: tuple[Segment, ...]


def hues(roles) -> dict[str, int]:
    """Each role's colour (HSL hue): the page's roles in order, a golden angle apart, so
    neighbours differ and a role has the same colour in every bar of the page."""
    return {role: round(i * 137.508) % 360 for i, role in enumerate(dict.fromkeys(roles))}


def draw(bar: MemoryBar, colours: dict[str, int] | None = None) -> DrawnBar:
    """A bar's rectangles: each role's share of the scale (the budget, or more when over)."""
    scale, x, segments = bar.scale, 0.0, []
    colours = colours if colours is not None else hues(h.role for h in bar.holdings)
    for h in bar.holdings:
        width = h.held / scale * BAR_UNITS
        observed = (min(h.observed, h.held) / scale * BAR_UNITS
                    if h.observed is not None else None)
        segments.append(Segment(role=h.role, held=h.held, x=x, width=width,
                                hue=colours.get(h.role, 0),
                                evictable=h.evictable, observed_width=observed))
        x += width
    budget_x = bar.budget / scale * BAR_UNITS if bar.budget else None
    return DrawnBar(name=bar.name, budget=bar.budget, held=bar.held, budget_x=budget_x,
                    segments=tuple(segments))


def _when(at: float | None) -> str:
    if not at:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int | None) -> str:
    return format_size(n) if n else "-"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("reconciler.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["size"] = _size
    env.filters["when"] = _when
    env.filters["short"] = lambda commit: commit[:10] if commit else "-"
    return env


_ENV = _environment()
_PAGE = _ENV.get_template("page.html.j2")
_LIVE = _ENV.get_template("live.html.j2")


def _values(snapshot, *, role_filter: str | None, log_role: str | None,
            log_lines: tuple[str, ...] | None) -> dict[str, Any]:
    events = [e for e in snapshot.events if role_filter in (None, "", e["role"])]
    roles = sorted({r["role"] for r in snapshot.rows} | {e["role"] for e in snapshot.events})
    colours = hues([r["role"] for r in snapshot.rows]
                   + [h.role for b in snapshot.bars for h in b.holdings])
    return {"s": snapshot, "bars": [draw(b, colours) for b in snapshot.bars], "events": events,
            "roles": roles, "role_filter": role_filter or "", "log_role": log_role or "",
            "log_lines": log_lines, "units": BAR_UNITS,
            "fetches": [dict(f, width=fetch_width(f)) for f in snapshot.fetches]}


def fetch_width(fetch: dict[str, Any]) -> float:
    """A fetch's progress bar, in bar units: the share of its bytes already in the cache."""
    total = fetch["total"]
    return BAR_UNITS * min(fetch["done"], total) / total if total > 0 else 0.0


def render(snapshot, *, live: bool = True, role_filter: str | None = None,
           log_role: str | None = None, log_lines: tuple[str, ...] | None = None) -> str:
    """The whole page. ``live``: served by the daemon (script, reload without JS);
    otherwise a file written once (``status --html``)."""
    # The style is the package's own file (not data): inserted as is, as the CSP hash says.
    return _PAGE.render(live=live, style=markupsafe.Markup(STYLE), script_path=SCRIPT_PATH, refresh=REFRESH,
                        **_values(snapshot, role_filter=role_filter, log_role=log_role,
                                  log_lines=log_lines))


def render_live(snapshot, *, role_filter: str | None = None) -> str:
    """Only the ``#live`` part (roles, memory, events), which ``page.js`` swaps in."""
    return _LIVE.render(**_values(snapshot, role_filter=role_filter, log_role=None,
                                  log_lines=None))
