"""One pass, room by room: load, remember, re-adopt, observe, plan, act, record
(``loop.plan_pass`` / ``loop.apply_pass``).

Layers and their rule: docs/architecture.md.
"""
