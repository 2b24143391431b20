"""Issue 39, item 6's smaller points that are fixed in code (the others are answered in docs/operators.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hami_devices.cli.main import main
from hami_devices.errors import InvalidRequest


def test_simulate_help_prints_percent_signs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "130% of GPU capacity" in text and "%%" not in text


def test_the_airflow_task_process_is_not_imported_twice() -> None:
    done = subprocess.run([sys.executable, "-m", "hami_devices.integrations.airflow.child"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0  # no CALL and RESULT given
    assert "found in sys.modules" not in done.stderr and "unpredictable behaviour" not in done.stderr


def test_share_on_a_ray_remote_names_the_fix() -> None:
    import ray  # the [ray] extra, which scripts/test.sh installs: a missing Ray fails here, never skips

    from hami_devices.integrations import ray as hray

    @ray.remote
    def work() -> int:
        return 1

    with pytest.raises(InvalidRequest, match=r"work is a ray.remote already: use @hray.share"):
        hray.share(memory_mib=100)(work)
