"""A rank that fails on a full disk is named with the cause in one line (issue 28): "No space
left on device", whether or not torch elastic could record the exception. Real 2-rank runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.run.launch.spawn import RunError, failure_error, last_exception, launch_local

ENOSPC = "OSError: [Errno 28] No space left on device"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("entry", ["disk_full", "disk_full_unrecorded"])
def test_a_full_disk_is_named_in_the_one_line_message(entry: str) -> None:
    with pytest.raises(RunError) as err:
        launch_local(f"run_entries_disk:{entry}", 2, payload={}, timeout_s=120)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("rank 1 failed: ") and ENOSPC in message, message
    assert err.value.rank == 1


def test_the_last_exception_of_a_log_is_its_cause() -> None:
    log = (
        "Traceback (most recent call last):\n  File 'x.py', line 3\n"
        "ValueError: first\nsome output\n"
        "Traceback (most recent call last):\n  File 'y.py', line 9\n"
        "    f.write(data)\n"
        f"{ENOSPC}\n[rank0]: other noise\n"
    )
    assert last_exception(log) == ENOSPC
    assert last_exception("no traceback here\n") is None
    error = failure_error(1, "exited with code 1", log, None)
    assert str(error) == f"rank 1 failed: {ENOSPC} (exited with code 1; from the log)"
    # A recorded cause is kept as it is.
    assert str(failure_error(1, "ValueError: x", log, None)) == "rank 1 failed: ValueError: x"
