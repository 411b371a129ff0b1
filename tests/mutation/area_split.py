"""Mutants of the glue the router's split added (proxy.py's ``_get``, which dispatch.py's
/props and /health looks go through), breaking a §9.1 rule an operator would notice;
``tests/mutation/catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("router/proxy.py", "props-body-never-read",
           "                if not json or answer.status != 200:",
           "                if True:",
           "§9.1: llama-server's total_slots (/props) are never read: each instance of a group "
           "takes one request at a time", "tests/router/test_groups.py"),
    mutant("router/proxy.py", "no-answer-looks-healthy",
           "        except (aiohttp.ClientError, asyncio.TimeoutError):\n            return 0, None",
           "        except (aiohttp.ClientError, asyncio.TimeoutError):\n            return 200, None",
           "§9.1: an instance that does not answer at all is put back in rotation after the "
           "hold, and clients' requests fail on it", "tests/router/test_groups.py"),
)
