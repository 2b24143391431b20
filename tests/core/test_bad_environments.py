"""Every verb, against each bad environment an operator meets: one clean line on stderr naming what is wrong
(and where), exit code 2, never a traceback.  The verbs run in-process, as ``hami-devices`` runs them."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_devices.cli.main import main
from hami_devices.ledger import SqliteLedger

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLAIM = EXAMPLES / "dra" / "mlu-t4-claim.yaml"
INVENTORY = (
    "nodes:\n  - name: n\n    cpu_milli: 8000\n    memory_mib: 32768\n    devices:\n"
    "      - {vendor: nvidia, model: T4, count: 1}\n"
)
WORKLOAD = "tasks:\n  - name: web\n    parts:\n      - {models: [T4], memory_mib: 1024, cores: 10}\n"
QUEUES = "queues:\n  - name: team\n    guarantee: {}\n"
UNBINDABLE = "192.0.2.1:9400"  # TEST-NET-1: documentation only, never an address of this machine


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(args)
    return code, capsys.readouterr().err.splitlines()


def assert_one_clean_line(code: int, err: list[str], *expected: str) -> None:
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("hami-devices: error: "), err
    for text in expected:
        assert text in err[0], (text, err[0])


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    written = {}
    for name, text in {"inventory": INVENTORY, "workload": WORKLOAD, "queues": QUEUES}.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        written[name] = str(path)
    written["tmp"] = str(tmp_path)
    return written


def ledger_verbs(f: dict[str, str]) -> dict[str, list[str]]:
    """Every verb that opens the ledger (``$HAMI_LEDGER``)."""
    inv = f["inventory"]
    return {
        "allocate": ["allocate", "--inventory", inv, "--model", "T4", "--memory", "100"],
        "release": ["release", "0123456789abcdef"],
        "monitor": ["monitor", "--inventory", inv],
        "allocations": ["allocations"],
        "allocations gc": ["allocations", "gc"],
        "events": ["events"],
        "usage": ["usage", "--from", "1h", "--by", "namespace"],
        "exporter": ["exporter", "--inventory", inv, "--once"],
        "extender": ["extender", "--inventory", inv, "--listen", "127.0.0.1:0", "--binder", f"record:{f['tmp']}/b"],
        "dra prepare": ["dra", "prepare", "--inventory", inv, "--node", "n", "--claim", str(CLAIM),
                        "--cdi-dir", f["tmp"]],
        "dra unprepare": ["dra", "unprepare", "--inventory", inv, "--node", "n", "--claim", str(CLAIM),
                          "--cdi-dir", f["tmp"]],
        "ray resources": ["ray", "resources", "--inventory", inv],
    }


VERB_NAMES = list(ledger_verbs({"inventory": "", "tmp": ""}))


@pytest.fixture
def locked_ledger(tmp_path: Path) -> Iterator[Path]:
    """A ledger another process holds with an exclusive lock (as a stuck writer would)."""
    path = tmp_path / "locked.db"
    SqliteLedger(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
         "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE'); "
         "c.execute('CREATE TABLE IF NOT EXISTS held (x)'); print('LOCKED', flush=True); sys.stdin.read()",
         str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
    yield path
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("verb", VERB_NAMES)
@pytest.mark.parametrize("damage", ["random bytes", "a text file"])
def test_a_ledger_that_is_not_sqlite(
    verb: str, damage: str, files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(bytes(range(256)) * 20 if damage == "random bytes" else b"not a ledger at all\n" * 200)
    monkeypatch.setenv("HAMI_LEDGER", str(ledger))
    code, err = run(ledger_verbs(files)[verb], capsys)
    assert_one_clean_line(code, err, "LedgerUnavailable", str(ledger), "not a readable ledger")


@pytest.mark.parametrize("verb", VERB_NAMES)
def test_a_locked_ledger(
    verb: str, files: dict[str, str], locked_ledger: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HAMI_LEDGER", str(locked_ledger))
    monkeypatch.setenv("HAMI_LEDGER_TIMEOUT", "0.2")
    code, err = run(ledger_verbs(files)[verb], capsys)
    assert_one_clean_line(code, err, "LedgerUnavailable", str(locked_ledger), "locked by another process")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("server", ["exporter", "extender"])
@pytest.mark.parametrize("address", ["in use", "not this machine's"])
def test_an_address_that_cannot_be_bound(
    server: str, address: str, taken_port: int, files: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HAMI_LEDGER", str(tmp_path / "ledger.db"))
    listen = f"127.0.0.1:{taken_port}" if address == "in use" else UNBINDABLE
    args = {
        "exporter": ["exporter", "--inventory", files["inventory"], "--listen", listen],
        "extender": ["extender", "--inventory", files["inventory"], "--listen", listen,
                     "--binder", f"record:{tmp_path}/binds"],
    }[server]
    code, err = run(args, capsys)
    reason = "another process serves that port" if address == "in use" else "not an address here"
    assert_one_clean_line(code, err, "CannotListen", listen, reason)


def test_a_region_folder_this_user_may_not_create(
    files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """/sys refuses a new folder to every user, root included: what allocates says so in one line; what only
    reads regions, or collects them, still works."""
    monkeypatch.setenv("HAMI_REGION_DIR", "/sys/hami-devices-regions")
    monkeypatch.setenv("HAMI_LEDGER", str(tmp_path / "ledger.db"))
    verbs = ledger_verbs(files)
    code, err = run(verbs["allocate"], capsys)
    assert_one_clean_line(code, err, "LimiterError", "/sys/hami-devices-regions", "HAMI_REGION_DIR")
    for verb in ("monitor", "allocations", "allocations gc", "exporter", "events"):
        assert main(verbs[verb]) == 0, verb
        assert "Traceback" not in capsys.readouterr().err


BAD_YAML = "first:\n  second: 1\n  third: a: b\n"  # a colon inside a plain value, line 3
MISSPELT = {
    "config": ("scheduler:\n  polcy: binpack\n", "scheduler.polcy", 2, "policy"),
    "inventory": (INVENTORY.replace("model: T4", "modle: T4"), "nodes.0.devices.0.modle", 6, "model"),
    "workload": (WORKLOAD.replace("memory_mib", "memroy_mib"), "tasks.0.parts.0.memroy_mib", 4, "memory_mib"),
    "queues": (QUEUES.replace("guarantee", "guarante"), "queues.0.guarante", 3, "guarantee"),
}


def yaml_verbs(f: dict[str, str], kind: str, path: str) -> list[list[str]]:
    """Every verb that reads a YAML file of ``kind``, given ``path`` for it."""
    g = {**f, kind: path}
    inv, wl, q = g["inventory"], g["workload"], g["queues"]
    with_config = [
        ["vendors"], ["discover", "--inventory", inv], ["allocate", "--inventory", inv, "--model", "T4"],
        ["release", "0123"], ["monitor", "--inventory", inv], ["allocations", "gc"],
        ["schedule", "--inventory", inv, "--workload", wl], ["exporter", "--inventory", inv, "--once"],
        ["dra", "publish", "--inventory", inv], ["queues", "check", "--queues", q],
        ["ray", "resources", "--inventory", inv],
    ]
    return {
        "config": [[*args, "--config", path] for args in with_config] + [["config", "validate", path]],
        "inventory": [["discover", "--inventory", inv], ["allocate", "--inventory", inv, "--model", "T4"],
                      ["monitor", "--inventory", inv], ["schedule", "--inventory", inv, "--workload", wl],
                      ["exporter", "--inventory", inv, "--once"], ["dra", "publish", "--inventory", inv],
                      ["queues", "check", "--queues", q, "--inventory", inv], ["ray", "resources", "--inventory", inv]],
        "workload": [["schedule", "--inventory", inv, "--workload", wl]],
        "queues": [["queues", "check", "--queues", q]],
    }[kind]


@pytest.mark.parametrize("kind", list(MISSPELT))
def test_yaml_errors_name_the_file_and_line_and_a_misspelt_key_gets_a_suggestion(
    kind: str, files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HAMI_LEDGER", str(tmp_path / "ledger.db"))
    broken, misspelt = tmp_path / f"broken-{kind}.yaml", tmp_path / f"misspelt-{kind}.yaml"
    broken.write_text(BAD_YAML)
    text, field, line, meant = MISSPELT[kind]
    misspelt.write_text(text)
    for args in yaml_verbs(files, kind, str(broken)):
        code, err = run(args, capsys)
        assert_one_clean_line(code, err, f"{broken}:3", "not valid YAML", "line 3")
        assert "<unicode string>" not in err[0]
    for args in yaml_verbs(files, kind, str(misspelt)):
        code, err = run(args, capsys)
        assert_one_clean_line(code, err, f"{misspelt}:{line}: {field}: ", f"; did you mean {meant!r}?")


def test_config_validation_reports_every_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("scheduler:\n  polcy: binpack\ndevice-plugin:\n  split-count: many\n  memory-overcommit: -1\n")
    code, err = run(["config", "validate", str(config)], capsys)
    assert_one_clean_line(
        code, err, f"{config}:2: scheduler.polcy: ", "; did you mean 'policy'?", "(3 errors)",
        "device-plugin.split-count:", "device-plugin.memory-overcommit:",
    )
