"""Where a request may go and how it is chosen: node taints and the tolerations that let a request past them,
and a request's own placement policies.

Taints and tolerations are Kubernetes' (a taint ``key=value:effect`` on a node keeps off
every request that does not tolerate it); both effects that keep new work off a node
(``NoSchedule``, ``NoExecute``) are hard here, as in the kube-scheduler's filter.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from hami_devices.models.base import HamiModel

ACCELERATOR_TAINT = "hami.io/accelerator"
"""The taint ``scheduler.keep-cpu-tasks-off-accelerators`` puts on every node with devices; a request with
device parts tolerates it without saying so (as Kubernetes' ExtendedResourceToleration does)."""

TaintEffect = Literal["NoSchedule", "NoExecute"]


class Taint(HamiModel):
    """A node's mark that keeps off requests that do not tolerate it."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = "NoSchedule"


class Toleration(HamiModel):
    """Lets a request onto nodes carrying a matching taint (Kubernetes' semantics).

    ``operator: Exists`` matches any value of ``key`` (no key: every taint); ``Equal``
    matches ``key=value``; no ``effect`` matches both effects.
    """

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | None = None

    @model_validator(mode="after")
    def _key_unless_exists(self) -> Self:
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        return self

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is None:
            return True
        return self.key == taint.key and (self.operator == "Exists" or self.value == taint.value)


class RequestPolicy(HamiModel):
    """The policies one request is placed by, overriding the engine's (HAMi's per-pod
    ``hami.io/node-scheduler-policy`` and ``hami.io/gpu-scheduler-policy``).

    ``node`` chooses the node, ``device`` the devices on it; each is a built-in or
    configured policy name, and an unset one is the engine's own for that level.
    """

    node: str | None = Field(default=None, min_length=1)
    device: str | None = Field(default=None, min_length=1)
