"""Policies: named weight sets over the scorers, built in or from a user's YAML.

YAML format (see ``examples/policies/``)::

    policies:
      - name: cheap-inference          # required, unique
        description: cheapest card that meets the SLO, packed
        weights:                       # scorer name -> weight >= 0; at least one > 0
          trait-affinity: 4
          binpack: 1
        topology_min_pair_score: 50    # optional, 0..100: "topology: required" threshold

A user policy may reuse a built-in name to override it.  Errors raise
``InvalidConfig`` naming the file and the dotted key (``policies.0.weights``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hami_devices.errors import InvalidConfig
from hami_devices.models import first_error
from hami_devices.yamlfile import located, read_yaml

SCORER_NAMES = ("binpack", "spread", "trait-affinity", "topology", "fragmentation", "locality", "bestfit")


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    weights: dict[str, float]
    topology_min_pair_score: float = Field(default=50.0, ge=0, le=100)

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for key, weight in value.items():
            if weight < 0:
                raise ValueError(f"weight of {key!r} must be >= 0")
        if not any(w > 0 for w in value.values()):
            raise ValueError("at least one weight must be > 0")
        return value


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: list[Policy] = Field(min_length=1)


def _builtin(name: str, description: str, **weights: float) -> Policy:
    return Policy(name=name, description=description, weights={k.replace("_", "-"): v for k, v in weights.items()})


BUILTIN: dict[str, Policy] = {
    p.name: p
    for p in (
        _builtin(
            "binpack", "fill the fullest fitting device first", binpack=3, trait_affinity=2, topology=1, locality=1
        ),
        _builtin(
            "spread", "put each task on the emptiest fitting device", spread=3, trait_affinity=2, topology=1, locality=1
        ),
        _builtin(
            "topology-aware", "best-connected device sets first", topology=5, trait_affinity=2, binpack=1, locality=1
        ),
        _builtin(
            "latency-aware",
            "hardware that suits the task type; inference meets its SLO cheaply",
            trait_affinity=5,
            spread=1,
            topology=1,
            locality=1,
        ),
        _builtin(
            "fragmentation-aware",
            "least rise of fragmentation for the workload mix learned online (FGD with host memory, "
            "stranded share and tie-breaks)",
            fragmentation=1,
        ),
        _builtin("bestfit", "the FGD paper's BestFit: least CPU and device share left on the node", bestfit=1),
    )
}


def parse_policies(
    data: Any, source: str = "<policies>", known_scorers: tuple[str, ...] = SCORER_NAMES
) -> dict[str, Policy]:
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc, PolicyFile)
        raise InvalidConfig(field, message, source=source) from None
    out: dict[str, Policy] = {}
    for i, policy in enumerate(parsed.policies):
        if policy.name in out:
            raise InvalidConfig(f"policies.{i}.name", f"duplicate policy {policy.name!r}", source=source)
        for key in policy.weights:
            if key not in known_scorers:
                raise InvalidConfig(
                    f"policies.{i}.weights.{key}",
                    f"unknown scorer (known: {', '.join(known_scorers)})",
                    source=source,
                )
        out[policy.name] = policy
    return out


def load_policies(path: str | Path, known_scorers: tuple[str, ...] = SCORER_NAMES) -> dict[str, Policy]:
    with located(path):
        return parse_policies(read_yaml(path, InvalidConfig), str(path), known_scorers)


def resolve_policy(policy: Policy | str, user: dict[str, Policy] | None = None) -> Policy:
    if isinstance(policy, Policy):
        return policy
    table = {**BUILTIN, **(user or {})}
    if policy not in table:
        raise InvalidConfig("policy", f"unknown policy {policy!r} (known: {', '.join(sorted(table))})")
    return table[policy]


def configured_policies(policy_files: list[str], extra: str | Path | None = None) -> dict[str, Policy]:
    """User policies from the configuration's ``policy-files`` and an extra file (later files win)."""
    out: dict[str, Policy] = {}
    for file in [*policy_files, *([extra] if extra else [])]:
        out.update(load_policies(file))
    return out
