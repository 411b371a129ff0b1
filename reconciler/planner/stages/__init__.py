"""The planner's pass as named stages, one module each; ``planner/plan.py`` lists them in order.

Each stage is a function ``stage(value) -> value`` from one of the types in
``values`` to the next: the per-role views, the ladder's drafts, the drafts
gated by fetches, the placed decisions, the ordered ``Plan``. A new stage is a
module here and one line in ``plan()``.
"""
