"""The kernel-log contract (``seam.KernelLog``): records, or nothing, never an error.

A post-mortem (§4) asks the kernel log for an out-of-memory kill; where it cannot
be read (no root, ``dmesg_restrict``, no ``/dev/kmsg``, another system) the answer
is an empty list, and the exit is still explained by its status and its log.
"""

from __future__ import annotations

from reconciler.platform import linux, portable
from reconciler.platform.seam import KernelLog
from reconciler.world import postmortem


def test_records_are_lines_or_nothing(platform):
    """Each implementation returns a list of strings (maybe empty) without raising."""
    assert isinstance(platform.kernel_log, KernelLog)
    records = platform.kernel_log.records()
    assert isinstance(records, list) and all(isinstance(r, str) for r in records)


def test_an_unreadable_kmsg_is_nothing(tmp_path):
    """A path that cannot be opened, or is a directory, reads as no records."""
    assert linux.Kmsg(str(tmp_path / "missing")).records() == []
    assert linux.Kmsg(str(tmp_path)).records() == []


def test_kmsg_records_are_read_one_per_line(tmp_path):
    """A readable file of records is read; the OOM line is found in what it holds."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("3,100,5000000,-;Out of memory: Killed process 4242 (llama-server) "
                    "total-vm:1kB\n")
    records = linux.Kmsg(str(kmsg)).records()
    assert "".join(records).startswith("3,100,5000000,-;Out of memory")
    assert postmortem.kernel_oom(4242, None, linux.Kmsg(str(kmsg))).startswith("Out of memory")


def test_the_portable_log_is_empty_and_explains_nothing():
    """portable has no kernel log: no OOM line, no error."""
    assert portable.NoKernelLog().records() == []
    assert postmortem.kernel_oom(4242, None, portable.NoKernelLog()) == ""
