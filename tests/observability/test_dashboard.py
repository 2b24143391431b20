"""The shipped Grafana dashboard and recording rules: valid against Grafana's dashboard schema and
promtool, and referring only to metrics the exporter serves."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import promql_parser
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from hami_devices.observability import compat, names, packaged
from tests.observability.prometheus import binary

# Grafana's own variables, given values as Grafana would substitute them before querying.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$node": ".*", "$namespace": ".*", "${datasource}": "prometheus"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(packaged("dashboard.json").read_text())
    return loaded


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(_panels(panel.get("panels", [])))
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query, Grafana variables substituted."""
    queries = []
    board = dashboard()
    for panel in _panels(board["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            queries.append((panel["title"], expr))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            inner = variable["query"]["query"]
            queries.append((variable["name"], inner[inner.index("(") + 1 : inner.rindex(",")]))
    return queries


def metric_names(node: Any) -> set[str]:
    """Every metric a parsed PromQL expression selects."""
    found: set[str] = set()
    if isinstance(node, promql_parser.VectorSelector):
        if node.name:
            found.add(node.name)
        return found
    for attr in ("expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, (str, int, float)):
            found |= metric_names(child)
    for arg in getattr(node, "args", None) or []:
        found |= metric_names(arg)
    return found


def _json(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.to_json() if hasattr(o, "to_json") else str(o)))


def _lost(mine: Any, theirs: Any, path: str = "") -> list[str]:
    """Keys or values of ``mine`` that did not survive a trip through the schema's models."""
    if isinstance(mine, dict):
        if not isinstance(theirs, dict):
            return [path]
        return [p for k in mine for p in (_lost(mine[k], theirs[k], f"{path}.{k}") if k in theirs else [f"{path}.{k}"])]
    if isinstance(mine, list):
        if not isinstance(theirs, list) or len(mine) != len(theirs):
            return [path]
        return [p for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if mine == theirs else [f"{path}: {mine!r} != {theirs!r}"]


def test_dashboard_round_trips_through_grafanas_dashboard_schema() -> None:
    """The foundation SDK's models are generated from Grafana's dashboard schema (panels by plugin):
    a field the schema does not know, or a value its enums refuse, does not survive the trip."""
    plugins.register_default_plugins()
    board = dashboard()
    model = Dashboard.from_json(board)
    assert _lost(board, _json(model.to_json())) == []
    assert model.uid and model.title and model.panels


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    panels = _panels(board["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
    titles = {p["title"] for p in panels}
    assert {"Device memory used by workload", "Core share granted by queue", "Refusals by reason"} <= titles


def test_dashboard_and_rules_refer_only_to_served_metrics() -> None:
    served = names.sample_names()
    used: set[str] = set()
    for title, expr in dashboard_queries():
        referenced = metric_names(promql_parser.parse(expr))
        assert referenced, f"{title}: {expr} selects no metric"
        assert referenced <= served, f"{title} uses {referenced - served}"
        used |= referenced
    shipped = packaged("prometheus-rules.yml").read_text()
    assert shipped == compat.rules_yaml(), "regenerate: python -m hami_devices.observability.compat"
    recorded = set()
    for rule in yaml.safe_load(shipped)["groups"][0]["rules"]:
        referenced = metric_names(promql_parser.parse(rule["expr"]))
        assert referenced and referenced <= served, rule["record"]
        recorded.add(rule["record"])
    assert recorded == {r.theirs for r in compat.RULES}
    assert {"hami_allocation_memory_used_bytes", "hami_allocation_refusals_total"} <= used


def test_promtool_accepts_the_recording_rules() -> None:
    done = subprocess.run(
        [binary("promtool"), "check", "rules", str(packaged("prometheus-rules.yml"))],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(compat.RULES)} rules found" in done.stdout
