"""The base install as a user gets it: the wheel `python -m build` makes, in a fresh venv, without extras.

The C parts come compiled in the wheel; the core verbs run; every optional feature names its extra.
"""

from __future__ import annotations

import json
import os
import tarfile
import zipfile
from pathlib import Path

from hami_devices.extras import EXTRA_OF_MODULE

from .conftest import REPO, Dists, Venv, clean_env

EXAMPLES = REPO / "examples"


def test_the_wheel_carries_the_compiled_parts_and_the_sample(dists: Dists) -> None:
    names = zipfile.ZipFile(dists.wheel).namelist()

    def has(prefix: str, suffix: str = "") -> bool:
        return any(n.startswith(prefix) and n.endswith(suffix) for n in names)

    assert has("hami_devices/_native", ".so") and has("hami_devices/_fgd", ".so")  # the cffi modules
    for shim in ("libhami_cuda.so", "libhami_ascend.so", "libhami_cambricon.so"):
        assert f"hami_devices/libs/{shim}" in names
    for fake in ("libcuda.so.1", "nvml/libnvidia-ml.so.1", "dcmi/libdcmi.so", "cndev/libcndev.so", "libcnrt.so"):
        assert f"hami_devices/libs/fakes/{fake}" in names
    assert "hami_devices/native/include/hami_region.h" in names and has("hami_devices/native/src/", "region.c")
    assert has("hami_devices/simulate/openb-sample/", "default.csv") and has(
        "hami_devices/simulate/openb-sample/", "README.md"
    )
    assert {"hami_nvidia/adapter.py", "hami_conformance/plugin.py", "hami_devices/traits/catalog.yaml"} <= set(names)
    # the sdist builds the wheel from sources only
    with tarfile.open(dists.sdist) as sdist:
        members = sdist.getnames()
    assert any(m.endswith("native/core/region.c") for m in members)
    assert not [m for m in members if m.endswith((".so", ".o")) or ".so." in m]


def test_no_optional_dependency_is_installed(base_venv: Venv) -> None:
    probe = (
        "import importlib.util, json, sys; print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))"
    )
    found = base_venv.run(base_venv.python, "-I", "-c", probe, *EXTRA_OF_MODULE)
    assert found.returncode == 0 and json.loads(found.stdout) == [], found.stdout + found.stderr


def test_every_verb_helps(base_venv: Venv) -> None:
    top = base_venv.run(base_venv.cli, "--help")
    assert top.returncode == 0, top.stderr
    verbs = base_venv.run(
        base_venv.python,
        "-I",
        "-c",
        "import argparse, contextlib, io, sys\n"
        "from hami_devices.cli.main import build_parser, main\n"
        "verbs = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)][0].choices\n"
        "for verb in verbs:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try:\n"
        "            main([verb, '--help'])\n"
        "        except SystemExit as exc:\n"
        "            assert exc.code == 0, (verb, exc.code)\n"
        "    assert 'usage: hami-devices ' + verb in out.getvalue(), verb\n"
        "    print(verb)\n",
    )
    assert verbs.returncode == 0, verbs.stderr
    # every verb module of the CLI imported on the base install (a module may register several verbs)
    assert len(verbs.stdout.split()) >= 20
    for verb in verbs.stdout.split():
        assert verb in top.stdout


def test_schedule_places_the_example_workload(base_venv: Venv) -> None:
    run = base_venv.run(
        base_venv.cli,
        "schedule",
        "--inventory",
        EXAMPLES / "cluster.yaml",
        "--workload",
        EXAMPLES / "workload.yaml",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["placed"] == out["tasks"] == len(out["results"]) > 10, run.stdout[:2000]
    assert all(r["placed"] and r["node"] for r in out["results"])


def test_simulate_replays_the_shipped_sample_without_matplotlib(base_venv: Venv, tmp_path: Path) -> None:
    run = base_venv.run(base_venv.cli, "simulate", "--policy", "bestfit", "--json", "--out", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    result = summary["results"][0]
    assert result["placed"] > 400 and 0 < result["unallocated_gpu_pct"] < 30, result
    assert "pip install 'hami-devices[plot]'" in run.stderr and summary["plot"] == "None"
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert "site-packages/hami_devices/simulate/openb-sample" in curve["nodes"]  # from the wheel, not this checkout


def test_optional_features_name_their_extra(base_venv: Venv, tmp_path: Path) -> None:
    env = {**clean_env(), "HAMI_LEDGER": str(tmp_path / "ledger.db")}
    cases = {
        "conformance": ["conformance", "nvidia"],
        "observability": ["exporter", "--once", "--inventory", str(EXAMPLES / "cluster.yaml")],
        "kubernetes": ["dra", "publish", "--inventory", str(EXAMPLES / "dra" / "inventory.yaml")],
        "plot": [
            "queues",
            "simulate",
            "--inventory",
            str(EXAMPLES / "queues" / "inventory.yaml"),
            "--queues",
            str(EXAMPLES / "queues" / "queues.yaml"),
            "--workload",
            str(EXAMPLES / "queues" / "workload.yaml"),
            "--plot",
            str(tmp_path / "q.png"),
        ],
    }
    for extra, args in cases.items():
        run = base_venv.run(base_venv.cli, *args, env=env)
        assert run.returncode == 2, (extra, run.stdout[-500:], run.stderr[-2000:])
        assert f"pip install 'hami-devices[{extra}]'" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "ledger.db").exists()  # nothing half-done: the exporter stopped before opening it


def test_doctor_passes_on_the_wheels_own_libraries(base_venv: Venv, tmp_path: Path) -> None:
    """The shims, fakes and cffi modules compiled into the wheel work: every check passes."""
    site = Path(
        base_venv.run(base_venv.python, "-I", "-c", "import hami_devices; print(hami_devices.__file__)").stdout.strip()
    )
    fakes = site.parent / "libs" / "fakes"
    assert fakes.is_dir() and not fakes.is_relative_to(REPO)
    fixture = tmp_path / "t4.conf"
    fixture.write_text((REPO / "vendors/nvidia/tests/fixtures/t4-pcie.conf").read_text())
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    env = {
        **clean_env(),
        "HAMI_NVML_LIBRARY": str(fakes / "nvml" / "libnvidia-ml.so.1"),
        "HAMI_FAKE_NVML_FIXTURE": str(fixture),
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(fakes), os.environ.get("LD_LIBRARY_PATH")) if p),
        "HAMI_LEDGER": str(tmp_path / "ledger.db"),
        "HAMI_REGION_DIR": str(tmp_path / "regions"),
    }
    run = base_venv.run(
        base_venv.cli, "doctor", "--json", "--vendor", "nvidia", "--dev-root", tmp_path / "dev", env=env
    )
    report = json.loads(run.stdout)
    assert run.returncode == 0, [c for c in report["checks"] if c["status"] != "PASS"]
    checks = {c["id"]: c for c in report["checks"]}
    assert str(site.parent) in checks["limiter.libhami_cuda.so.load"]["why"]
    assert checks["limiter.libhami_cuda.so.effective"]["status"] == "PASS"
    # the region API a plugin builds against is installed too
    api = base_venv.run(
        base_venv.python,
        "-I",
        "-c",
        "from hami_devices import limiter; print(limiter.include_dir()); print(len(limiter.core_sources()))",
    )
    include, sources = api.stdout.split()
    assert (Path(include) / "hami_region.h").is_file() and int(sources) >= 5
