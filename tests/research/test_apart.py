"""The research subpackage stands apart: the core runs without its extra, the old paths forward with a warning,
and the research code without its solver says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import hami_devices.research.bound.configlp as configlp

# Run in a fresh interpreter where highspy cannot be imported (as in an install without the extra).
WITHOUT_SOLVER = textwrap.dedent(
    """
    import sys
    sys.modules["highspy"] = None  # an import of it fails as an absent module's does

    import hami_devices, hami_devices.scheduling, hami_devices.simulate
    assert not [m for m in sys.modules if m.startswith("hami_devices.research")], "the core loaded research"

    import numpy as np
    from hami_devices.errors import MissingExtra
    from hami_devices.research.bound.configlp import config_bound
    from hami_devices.research.bound.instance import build_instance
    from hami_devices.simulate.trace import TraceNodes, TracePods

    one = np.array([1], dtype=np.int64)
    nodes = TraceNodes(names=("n0",), cpu_milli=one * 8000, memory_mib=one * 8192, gpus=one,
                       model_idx=one * 0, models=("T4",))
    pods = TracePods(names=("t0",), cpu_milli=one * 1000, memory_mib=one * 1024, num_gpu=one,
                     gpu_milli=one * 500, spec=(None,))
    try:
        config_bound(build_instance(nodes, pods, [0]))
    except MissingExtra as exc:
        print(exc.extra, exc.module)
    """
)


def test_the_core_runs_without_the_research_extra_and_research_names_it() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_SOLVER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["research", "highspy"]


def test_an_old_path_forwards_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"hami_devices\.research\.bound\.configlp"):
        from hami_devices.simulate.bound.configlp import config_bound
    assert config_bound is configlp.config_bound


def test_an_old_path_has_no_name_its_new_home_lacks() -> None:
    import hami_devices.simulate.bound.configlp as old

    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        _ = old.no_such_name
