"""The operating system's process facts behind one seam: Protocols and their implementations.

``seam.py`` says what the rest of the package asks of the machine (the process
table, listeners, exit watching, the kernel log); ``linux.py`` answers it with
``/proc``, sock_diag netlink, pidfds and ``/dev/kmsg``; ``portable.py`` with
psutil alone and a polling exit watch (``pollwatch.py``); ``macos.py`` with psutil
and one kqueue (``kqwatch.py``); ``choose.py`` picks one
(``RECONCILER_PLATFORM``).
"""
