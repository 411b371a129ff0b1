"""Mutants of the router's balancing and failover (BEHAVIOUR §9.1): each must be killed."""

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("router/balancing.py", "full-instance-chosen",
           "if not instance.ready or not has_room(instance, alone):",
           "if not instance.ready:",
           "§9.1: a request goes to a full instance while another has room",
           "tests/router/test_balancing.py", "tests/router/test_groups.py"),
    mutant("router/balancing.py", "slots-ignored-in-capacity",
           "slots = max(instance.slots or 1, 1)", "slots = 1",
           "§9.1: an instance of 4 slots takes one request at once; the rest wait",
           "tests/router/test_balancing.py", "tests/router/test_groups.py"),
    mutant("router/proxy.py", "learned-slots-ignored",
           "slots=self._slots.get(r.role) or r.slots,", "slots=r.slots,",
           "§9.1: llama-server's total_slots (/props) never reach the choice",
           "tests/router/test_groups.py"),
    mutant("router/proxy.py", "failed-instance-kept-in-rotation",
           "if route.role in self._out and route.state is RouteState.READY:",
           "if False:",
           "§9.1: an instance that answered 5xx or died keeps getting requests",
           "tests/router/test_groups.py"),
    mutant("router/proxy.py", "unsent-request-not-retried",
           "                refusals += 1\n",
           "                return self._error(502, 'refused', 'api_error', group)\n",
           "§9.1: a request refused by a dead instance's port fails instead of going to another",
           "tests/router/test_groups.py"),
    mutant("router/queues.py", "group-waits-for-instance-0",
           "ready = next((r for r in group if r.state is RouteState.READY",
           "ready = next((r for r in group[:1] if r.state is RouteState.READY",
           "§9.1: requests for a group wait for instance 0 though another is ready",
           "tests/router/test_groups.py"),
)
