"""The local stack stops on SIGINT even when started with SIGINT ignored (ray_dspine/local_cluster.py rule
`serving`): a child process sees SIGINT ignored only if the launcher left it so."""

import signal
import subprocess
import sys

CHILD_SEES_IGNORED = (
    "import signal, subprocess, sys\n"
    "{setup}\n"
    "probe = 'import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)'\n"
    "print(subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True).stdout.strip())\n"
)


def run_ignoring_sigint(setup: str) -> str:
    """Run a launcher started as a non-interactive shell's background job is (SIGINT ignored); return what
    its child says about its own SIGINT."""
    script = CHILD_SEES_IGNORED.format(setup=setup)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_ignored_sigint_is_inherited_without_the_handlers():
    assert run_ignoring_sigint("pass") == "True"


def test_the_stack_launcher_hands_its_children_a_working_sigint():
    setup = "from ray_dspine.local_cluster import handle_stop_signals\nhandle_stop_signals()"
    assert run_ignoring_sigint(setup) == "False"
