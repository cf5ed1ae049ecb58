"""Native stacks of held server processes by py-spy (a dev dependency): several at once, one bound."""

from __future__ import annotations

import subprocess
import sys
import time

from cnnbench.serve import stacks


def test_native_stacks_of_several_processes_come_in_one_block_each(capsys):
    programs = [f"import time\ndef held_{i}():\n    time.sleep(60)\nheld_{i}()" for i in range(2)]
    sleepers = [subprocess.Popen([sys.executable, "-c", program]) for program in programs]
    try:
        time.sleep(1.0)  # past the interpreter's start
        began = time.monotonic()
        assert stacks.print_native_stacks([p.pid for p in sleepers])
        assert time.monotonic() - began < stacks.NATIVE_STACKS_TIMEOUT_S
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    err = capsys.readouterr().err
    for i, sleeper in enumerate(sleepers):  # each block under its own header, naming that process's function
        block = err.split(f"native stacks of pid {sleeper.pid} ")[1].split("cnnbench serve:")[0]
        assert f"held_{i} " in block and f"held_{1 - i} " not in block, err
    assert "clock_nanosleep" in err or "select" in err, err  # a native frame below time.sleep


def test_a_process_that_is_gone_is_a_failed_dump_not_an_exception(capsys):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not stacks.print_native_stacks([gone.pid])
    assert f"native stacks of pid {gone.pid}" in capsys.readouterr().err
    assert not stacks.print_native_stacks([])  # nothing held: nothing run
