"""Why a server exited, in words (reconciler.exitreasons): headline, excerpt, log tail, OOM records."""

from __future__ import annotations

from reconciler.planner import exitreasons
from reconciler.core.observed import ExitInfo

#: What the testbed's llama-server logs when ``kv_quant: q8_0`` meets head dim 16 (real output).
Q8_LOG = (
    "0.00.000.752 I srv  llama_server: initializing ...",
    "0.00.008.096 I srv    load_model: loading model '/opt/reconciler-testbed/models/tiny.gguf'",
    "0.00.009.286 E llama_init_from_model: K cache type q8_0 with block size 32 does not divide n_embd_head_k=16",
    "0.00.010.382 E cmn  common_init_: failed to create context with model 'tiny.gguf'",
    "0.00.010.402 I srv    operator(): operator(): cleaning up before exit...",
    "0.00.010.637 E srv  llama_server: exiting due to model loading error",
)
TRACEBACK = (
    "Fetching 5 files: 100%",
    "Traceback (most recent call last):",
    '  File "/venv/lib/mlx_lm/server.py", line 900, in main',
    "    raise ValueError('no safetensors found')",
    "ValueError: no safetensors found in /models/x",
)


def test_headline_names_the_code_the_signal_or_that_it_cannot_be_known():
    """A child's code or signal is said; a server that was not our child says its status is unknown."""
    assert exitreasons.headline(ExitInfo(known=True, code=1)) == "exited (code 1)"
    assert exitreasons.headline(ExitInfo(known=True, code=0)) == "exited (code 0)"
    assert exitreasons.headline(ExitInfo(known=True, signal=11)) == "killed by SIGSEGV"
    assert exitreasons.headline(ExitInfo(known=True, signal=64)) == "killed by signal 64"
    assert exitreasons.headline(ExitInfo(known=True, signal=9, oom="Out of memory: Killed process 7 (x)")) \
        == "killed by SIGKILL (out of memory)"
    assert exitreasons.headline(ExitInfo()) == "exited (exit status unknown: not a child of this reconciler)"
    assert exitreasons.headline(ExitInfo(oom="Killed process 7 (x)")) == "killed (out of memory)"
    assert exitreasons.headline(ExitInfo(pending=True)) == "exited (exit status not recorded yet)"


def test_from_returncode_reads_popen_semantics():
    """A negative return code is the signal that ended the child; otherwise it is its exit code."""
    assert exitreasons.from_returncode(-9) == ExitInfo(known=True, signal=9)
    assert exitreasons.from_returncode(3) == ExitInfo(known=True, code=3)


def test_excerpt_of_llama_cpp_is_its_first_error_not_its_last():
    """llama.cpp's first E line is the cause; "exiting due to model loading error" is its consequence."""
    assert exitreasons.excerpt(Q8_LOG) == ("llama_init_from_model: K cache type q8_0 with block size 32 "
                                     "does not divide n_embd_head_k=16")


def test_excerpt_of_a_python_server_is_the_exception_it_died_of():
    """A traceback's last unindented line (the exception) is the excerpt."""
    assert exitreasons.excerpt(TRACEBACK) == "ValueError: no safetensors found in /models/x"


def test_excerpt_prefers_an_error_line_then_the_last_line():
    """Without level marks: the first line that reads like an error, else the last line, so named."""
    assert exitreasons.excerpt(("starting", "error: cannot bind 0.0.0.0:80", "bye")) == \
        "error: cannot bind 0.0.0.0:80"
    assert exitreasons.excerpt(("starting", "listening", "bye", "")) == "last log line: bye"
    assert exitreasons.excerpt(()) == "" and exitreasons.excerpt(("", "  ")) == ""


def test_excerpt_is_one_short_line_without_colour_codes():
    """An excerpt is cut to EXCERPT_CHARS, with an ellipsis, and loses ANSI colours and runs of blanks."""
    long = "E " + "x" * 500
    got = exitreasons.excerpt(("\x1b[31mfatal:   " + "y" * 300 + "\x1b[0m",))
    assert len(got) == exitreasons.EXCERPT_CHARS and got.endswith("…") and got.startswith("fatal: yyy")
    assert "\x1b" not in got and "\n" not in exitreasons.excerpt((long,))


def test_summary_joins_headline_and_the_telling_line():
    """The summary is the headline, a colon, then the OOM line or the log's excerpt."""
    info = ExitInfo(known=True, code=1, log=Q8_LOG)
    assert exitreasons.summary(info) == ("exited (code 1): llama_init_from_model: K cache type q8_0 with "
                                   "block size 32 does not divide n_embd_head_k=16")
    oom = ExitInfo(known=True, signal=9, oom="Out of memory: Killed process 7 (llama-server)",
                   log=Q8_LOG)
    assert exitreasons.summary(oom) == ("killed by SIGKILL (out of memory): Out of memory: Killed "
                                  "process 7 (llama-server)")
    assert exitreasons.summary(ExitInfo(known=True, code=0)) == "exited (code 0)"


def test_tail_lines_keeps_the_last_run_only():
    """Lines before the last run mark belong to an earlier server and are not this exit's."""
    data = b"E old cause\nold end\n" + exitreasons.RUN_MARK.encode() + b"2026: starting x ---\nnew\nE new cause\n"
    assert exitreasons.tail_lines(data) == ("new", "E new cause")


def test_tail_lines_drops_a_partial_first_line_and_keeps_count():
    """A tail read that starts mid-line drops that fragment; at most ``count`` lines are kept."""
    data = b"ment of a line\n" + b"".join(b"line %d\n" % i for i in range(30))
    got = exitreasons.tail_lines(data, count=5)
    assert got == tuple(f"line {i}" for i in range(25, 30))
    assert exitreasons.tail_lines(b"a\r\nb\r\n") == ("a", "b")


KMSG = [
    "6,900,1000000,-;Out of memory: Killed process 4242 (llama-server) total-vm:99kB, anon-rss:9kB",
    "3,901,1000100,-;oom-kill:constraint=CONSTRAINT_NONE,task=llama-server,pid=4242,uid=65534",
    "14,902,1000200,-;Out of memory: Killed process 5151 (forged) total-vm:1kB",  # user space wrote it
    "6,903,50,-;Out of memory: Killed process 6161 (old) total-vm:1kB",
    "garbage without a separator",
    "x,y,z;Out of memory: Killed process 7 (bad header)",
]


def test_oom_line_finds_the_kernels_kill_of_that_pid():
    """The kernel's "Killed process PID" record of the pid is found; the one-line message is kept."""
    assert exitreasons.oom_line(KMSG, 4242) == ("Out of memory: Killed process 4242 (llama-server) "
                                          "total-vm:99kB, anon-rss:9kB")
    assert exitreasons.oom_line(KMSG[1:2], 4242).startswith("oom-kill:")
    assert exitreasons.oom_line(KMSG, 42) == ""  # a prefix of 4242 is not 42


def test_oom_line_ignores_what_user_space_wrote_and_older_kills():
    """Only facility 0 (the kernel) counts, and only records after the process started."""
    assert exitreasons.oom_line(KMSG, 5151) == ""
    assert exitreasons.oom_line(KMSG, 6161) != ""
    assert exitreasons.oom_line(KMSG, 6161, after_us=1000) == ""
    assert exitreasons.oom_line(KMSG, 7) == ""


def test_only_lines_since_the_last_spawn_mark_are_this_runs():
    """Rule (§4: every exit says why, about this run): a log appended to across restarts holds
    several spawn marks (the literal line spawn writes); only lines after the LAST one are this
    run's, so an earlier run's error never explains this exit."""
    data = (b"E first cause\n"
            b"--- reconciler: 2026-12-01T07:00:00Z: starting llama-server ---\n"
            b"E second cause\nsecond end\n"
            b"--- reconciler: 2026-12-01T07:05:00Z: starting llama-server ---\n"
            b"third\nE third cause\n")
    assert exitreasons.tail_lines(data) == ("third", "E third cause")
    assert exitreasons.tail_lines(b"a\n--- reconciler: t: starting x ---\n") == ()
    # A line that merely quotes a mark, not at its start, is no mark.
    assert exitreasons.tail_lines(b"x\nE echo --- reconciler: y\nz\n") == (
        "x", "E echo --- reconciler: y", "z")
