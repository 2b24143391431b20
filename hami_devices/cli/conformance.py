"""``hami-devices conformance``: certify a vendor adapter with the conformance suite.

Runs the suite (the ``hami_conformance`` pytest plugin) in this process and
exits non-zero when a MUST check fails; SHOULD failures are reported only
(``--strict`` makes them fatal too).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hami_devices.cli.output import error
from hami_devices.extras import require
from hami_devices.plugins import conformance_suite

EXIT_CERTIFIED = 0
EXIT_MUST_FAILED = 1
EXIT_NOT_RUN = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="run the conformance suite against a vendor adapter",
        description=(
            "Certify a vendor adapter: every check of the conformance catalog, with MUST/SHOULD levels and "
            "N/A for capabilities the adapter does not declare.  Exits 1 when a MUST check fails."
        ),
    )
    parser.add_argument("name", nargs="?", help="the adapter's entry-point name in hami_devices.vendors")
    parser.add_argument("--adapter-class", metavar="MODULE:CLASS", help="an adapter class that is not installed")
    parser.add_argument("--inventory", metavar="FILE", help="run on the simulated back end built from FILE")
    parser.add_argument("--config", metavar="FILE", help="configuration YAML for the adapter")
    parser.add_argument(
        "--backend",
        choices=("auto", "hardware", "simulated"),
        default="auto",
        help="auto: the hardware back end when the adapter finds it, else simulated (default)",
    )
    parser.add_argument("--junit-xml", metavar="FILE", help="write JUnit XML to FILE")
    parser.add_argument("--report", metavar="FILE", help="write the JSON report to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="write the Markdown summary to FILE")
    parser.add_argument("--examples", type=int, metavar="N", help="random sequences for the state machine")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only checks matching EXPR (pytest -k)")
    parser.add_argument("--strict", action="store_true", help="also exit 1 when a SHOULD check fails")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="one line per check")
    parser.set_defaults(func=run)


def pytest_args(args: argparse.Namespace, report: str, ini: str) -> list[str]:
    suite = conformance_suite()
    # rootdir = where the user is, so pytest names each check "hami-conformance::<id>" without a path
    argv = [str(suite.catalog_path()), "-c", ini, "--rootdir", os.getcwd(), "-p", "no:cacheprovider",
            "--hami-report", report]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        argv += ["-p", suite.PYTEST_PLUGIN]
    if args.name:
        argv += ["--hami-adapter", args.name]
    if args.adapter_class:
        argv += ["--hami-adapter-class", args.adapter_class]
    for option, value in (
        ("--hami-inventory", args.inventory),
        ("--hami-config", args.config),
        ("--hami-markdown", args.markdown),
        ("--junitxml", args.junit_xml),
        ("-k", args.keyword),
    ):
        if value:
            argv += [option, str(value)]
    argv += ["--hami-backend", args.backend]
    if args.examples is not None:
        argv += ["--hami-examples", str(args.examples)]
    argv += ["-v"] * args.verbose if args.verbose else ["-q"]
    return argv


def exit_code(report: dict[str, Any], strict: bool) -> int:
    counts = report["counts"]
    if counts["MUST"]["fail"]:
        return EXIT_MUST_FAILED
    if strict and counts["SHOULD"]["fail"]:
        return EXIT_MUST_FAILED
    if counts["MUST"]["pass"] + counts["MUST"]["n/a"] == 0:
        return EXIT_NOT_RUN
    return EXIT_CERTIFIED


def run(args: argparse.Namespace) -> int:
    # the suite is a pytest plugin with hypothesis state machines: both come with the [conformance] extra
    pytest = require("pytest", "hami-devices conformance")
    require("hypothesis", "hami-devices conformance")
    if not args.name and not args.adapter_class:
        error("conformance: give the adapter's NAME or --adapter-class MODULE:CLASS")
        return EXIT_NOT_RUN
    with tempfile.TemporaryDirectory(prefix="hami-conformance-cli-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\njunit_suite_name = hami-conformance\njunit_family = xunit2\n")
        json_path = Path(args.report) if args.report else Path(tmp) / "report.json"
        status = pytest.main(pytest_args(args, str(json_path), str(ini)))
        if not json_path.is_file():
            error(f"conformance: the suite did not run (pytest exit status {int(status)})")
            return EXIT_NOT_RUN
        report = json.loads(json_path.read_text())
    return exit_code(report, args.strict)
