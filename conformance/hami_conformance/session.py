"""The active half of the plugin: one conformance run against one adapter.

Registered by ``plugin.pytest_configure`` only when the suite was asked for.  It
points collection at ``catalog.yaml`` (one pytest item per catalog entry),
turns undeclared capabilities into N/A verdicts with their reason, and writes
the JSON and Markdown reports next to pytest's own JUnit XML.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_conformance import SUITE_VERSION
from hami_conformance.bench import (
    CONFIG_DIR,
    CheckFailed,
    ConfiguredOff,
    NotApplicable,
    SuiteError,
    Target,
    load_adapter,
    resolve_target,
)
from hami_conformance.catalog import CheckSpec, catalog_path, load_catalog
from hami_conformance.checks import CheckFn, load_all
from hami_conformance.checks.stateful import EXAMPLES_ENV
from hami_conformance.report import FAIL, NA, PASS, CheckResult, Report
from hami_conformance.shims import shim_problem
from hami_devices.config import HamiConfig, load_config
from hami_devices.errors import HamiError, LimiterError

NA_PREFIX = "N/A: "
SUITE_NODE = "hami-conformance"
"""The collector every check hangs under: node ids read ``hami-conformance::<check id>``, not a file path."""


class CheckItem(pytest.Item):
    """One catalog check, run on a fresh bench."""

    def __init__(self, *, spec: CheckSpec, fn: CheckFn, owner: ConformanceSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.fn = fn
        self.owner = owner
        self.user_properties.append(("level", str(spec.level)))
        self.user_properties.append(("requirement", spec.requirement))
        if spec.capability:
            self.user_properties.append(("capability", str(spec.capability)))
        self.add_marker(spec.level.lower())
        self.add_marker(spec.group.replace("-", "_"))

    def runtest(self) -> None:
        self.owner.run_check(self.spec, self.fn)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        head = f"[{self.spec.level}] {self.spec.id}: {self.spec.requirement}"
        if isinstance(excinfo.value, CheckFailed):
            return f"{head}\n  -> {excinfo.value}"
        error = f"{type(excinfo.value).__name__}: {excinfo.value}"
        return f"{head}\n  -> {error}\n{super().repr_failure(excinfo, style='short')}"

    def _traceback_filter(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
        # the suite's and the adapter's frames only: pytest's and pluggy's say nothing about the adapter
        return excinfo.traceback.filter(lambda entry: not _machinery(str(entry.path)))

    def reportinfo(self) -> tuple[str, int | None, str]:
        # no file location: a check is named by its catalog id wherever pytest reports it
        return "", None, f"[{self.spec.level}] {self.spec.id}"


class CatalogFile(pytest.File):
    """catalog.yaml, collected as the suite: one item per check."""

    owner: ConformanceSession

    def collect(self) -> Iterator[CheckItem]:
        implementations = load_all()
        for spec in load_catalog():
            fn = implementations.get(spec.id)
            if fn is None:
                raise SuiteError(f"catalog check {spec.id!r} has no implementation")
            yield CheckItem.from_parent(self, name=spec.id, spec=spec, fn=fn, owner=self.owner)


class ConformanceSession:
    PLUGIN_NAME = "hami-conformance-session"

    def __init__(self, config: pytest.Config, target: Target) -> None:
        self.config = config
        self.target = target
        self.results = {spec.id: CheckResult(spec) for spec in load_catalog()}
        self.nodeids: dict[str, str] = {}
        self.failure_reasons: dict[str, str] = {}
        self.started = time.time()
        self._tmp: str | None = None
        self._saved_env: dict[str, str | None] = {}

    # -- set-up -------------------------------------------------------------------
    @classmethod
    def start(cls, config: pytest.Config) -> ConformanceSession:
        try:
            name, class_path = config.getoption("hami_adapter"), config.getoption("hami_adapter_class")
            config_file = config.getoption("hami_config")
            hami_config = load_config(config_file) if config_file else HamiConfig()
            adapter, plugin = load_adapter(name, class_path, hami_config)
            shipped = CONFIG_DIR / f"{adapter.name}.yaml"
            if not config_file and shipped.is_file():
                config_file = str(shipped)
                adapter, plugin = load_adapter(name, class_path, load_config(shipped))
            target = resolve_target(
                adapter,
                plugin,
                inventory=config.getoption("hami_inventory"),
                backend=config.getoption("hami_backend"),
            )
        except (SuiteError, HamiError) as exc:
            raise pytest.UsageError(f"hami-conformance: {exc}") from None
        target.config_source = config_file or "defaults"
        session = cls(config, target)
        session._isolate_environment()
        for marker, text in (
            ("must", "a MUST check of the hami-devices conformance suite"),
            ("should", "a SHOULD check of the hami-devices conformance suite"),
        ):
            config.addinivalue_line("markers", f"{marker}: {text}")
        for group in {spec.group for spec in load_catalog()}:
            config.addinivalue_line("markers", f"{group.replace('-', '_')}: conformance checks of group {group}")
        suite = str(catalog_path())
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            if suite not in config.args:
                config.args.append(suite)
        else:
            config.args[:] = [suite]
        return session

    def _isolate_environment(self) -> None:
        """Limiter regions go to a private folder; the example budget reaches the state machine."""
        self._tmp = tempfile.mkdtemp(prefix="hami-conformance-")
        updates = {"HAMI_REGION_DIR": os.path.join(self._tmp, "regions")}
        os.makedirs(updates["HAMI_REGION_DIR"])
        examples = self.config.getoption("hami_examples")
        if examples is not None:
            updates[EXAMPLES_ENV] = str(examples)
        for key, value in updates.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- collection ---------------------------------------------------------------
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() != catalog_path().resolve():
            return None
        node = CatalogFile.from_parent(parent, path=file_path, nodeid=SUITE_NODE)
        node.owner = self
        return node

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        a = self.target.describe()
        return [
            f"hami-conformance {SUITE_VERSION}: adapter {a['name']} {a['version']} ({a['class']})",
            f"  back end: {a['backend']}; {a['probe']}",
            f"  capabilities: {', '.join(a['capabilities']) or 'none'}",
        ]

    # -- running ---------------------------------------------------------------------
    def run_check(self, spec: CheckSpec, fn: CheckFn) -> None:
        adapter = self.target.adapter
        if spec.capability is not None and spec.capability not in adapter.capabilities:
            pytest.skip(
                f"{NA_PREFIX}capability '{spec.capability}' is not declared by adapter {adapter.name} {adapter.version}"
            )
        bench = self.target.bench()
        try:
            try:
                fn(bench)
            except NotApplicable as exc:
                # Declaring a capability is a claim the suite must be able to prove: a check of a
                # declared capability that cannot run fails.  Only the operator's configuration
                # (isolation-level) may switch one off.
                if spec.capability is not None and not isinstance(exc, ConfiguredOff):
                    raise CheckFailed(
                        f"capability '{spec.capability}' is declared, but this check cannot run: {exc}"
                    ) from None
                pytest.skip(f"{NA_PREFIX}{exc}")
        except pytest.skip.Exception:
            raise
        except LimiterError as exc:
            problem = shim_problem(adapter)
            if problem is None:
                self.failure_reasons[spec.id] = f"{type(exc).__name__}: {exc}"
                raise
            # one cause, said in full once (identity.adapter): every allocation of this run fails the same way
            reason = f"cannot allocate: limiter_shim {adapter.limiter_shim!r} is not built (see identity.adapter)"
            self.failure_reasons[spec.id] = reason
            raise CheckFailed(reason) from None
        except Exception as exc:
            self.failure_reasons[spec.id] = str(exc) if isinstance(exc, CheckFailed) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            bench.cleanup()

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if isinstance(item, CheckItem):
            self.nodeids[item.nodeid] = item.spec.id

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        check_id = self.nodeids.get(report.nodeid)
        if check_id is None:
            return
        result = self.results[check_id]
        result.duration_s += report.duration
        if report.failed:
            if result.result != FAIL:
                result.reason = self.failure_reasons.get(check_id) or _first_line(report.longreprtext)
            result.result = FAIL
        elif report.skipped and result.result != FAIL:
            result.result = NA
            message = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            message = message.removeprefix("Skipped: ")
            result.reason = message.removeprefix(NA_PREFIX)
        elif report.when == "call" and report.passed and result.result not in (FAIL, NA):
            result.result = PASS

    # -- reports -----------------------------------------------------------------------
    def report(self) -> Report:
        adapter = dict(self.target.describe())
        adapter["devices"] = None
        return Report(
            suite_version=SUITE_VERSION,
            adapter=adapter,
            results=list(self.results.values()),
            started_at=self.started,
            duration_s=time.time() - self.started,
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        report = self.report()
        self._junit_properties(report)
        json_path = self.config.getoption("hami_report")
        if json_path:
            report.write_json(json_path)
        md_path = self.config.getoption("hami_markdown")
        if md_path:
            report.write_markdown(md_path)

    def _junit_properties(self, report: Report) -> None:
        """The verdict as <testsuite> properties of the JUnit XML (written after this hook)."""
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        a = report.adapter
        for name, value in (
            ("hami.adapter", f"{a['name']} {a['version']}"),
            ("hami.backend", a["backend"]),
            ("hami.capabilities", ",".join(a["capabilities"])),
            ("hami.certified", str(report.certified).lower()),
            ("hami.level", report.level),
            ("hami.claimed-level", report.claimed_level),
            ("hami.full-level", str(report.full_level).lower()),
        ):
            xml.add_global_property(name, value)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Iterator[None]:
        # before pytest's own sections, so a failing run opens with the verdict, not with tracebacks
        self._summary(terminalreporter)
        return (yield)

    def _summary(self, terminalreporter: Any) -> None:
        report = self.report()
        tr = terminalreporter
        tr.section("hami-devices conformance")
        a = report.adapter
        tr.write_line(f"adapter {a['name']} {a['version']} on {a['backend']}")
        for level, c in report.counts().items():
            if level == "total":
                continue
            tr.write_line(
                f"  {level:<6} pass {c[PASS]:>3}  fail {c[FAIL]:>3}  n/a {c[NA]:>3}  not run {c['not-run']:>3}"
            )
        for r in report.results:
            if r.result == NA:
                tr.write_line(f"  N/A  {r.spec.id}: {r.reason}")
        for r in report.results:
            if r.result == FAIL:
                tr.write_line(f"  FAIL {r.spec.id} [{r.spec.level}]: {_first_line(r.reason)}")
        for lr in report.levels():
            mark = "earned" if lr.earned else ("not claimed" if not lr.claimed else "NOT earned")
            tr.write_line(f"  level {lr.spec.name:<10} {mark}: {_first_line(lr.detail)}")
        tr.write_line(f"  {report.verdict()}")


def _machinery(path: str) -> bool:
    return any(f"{os.sep}{name}{os.sep}" in path for name in ("_pytest", "pluggy"))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return ""
