"""The router (BEHAVIOUR §9): one OpenAI-compatible endpoint for every role of a node.

``rules`` (PURE) decides: which role a request names, when it is forwarded,
what the server sees, what an error looks like. ``queues`` keeps the demand
(counts and waiting requests) that the planner reads each pass. ``proxy``
speaks HTTP on both sides (aiohttp); ``dispatch``, its base class, decides where
a request goes upstream and what a failure there does. ``service`` runs it all in a thread of
its own beside the ``watch`` daemon and does the hand-offs. This package
module imports nothing, so ``import reconciler.router.rules`` stays pure.
"""
