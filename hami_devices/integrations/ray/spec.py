"""The ``hami`` field of a Ray runtime env: what one task or actor asks for, and what it is called.

``runtime_env={"hami": {"memory_mib": 4096, "cores": 30, "models": ["T4"]}}`` is one
request part (every ``RequestPart`` field is accepted) plus three keys of its own:
``share`` (an id that makes the env distinct, so it gets its own allocation),
``task_type`` and ``grant_timeout_s``.  Ray installs a runtime env once per distinct
value, so the share is named by a digest of the whole field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from hami_devices.errors import InvalidRequest
from hami_devices.models import HamiModel, RequestPart, ResourceRequest, TaskType

FIELD = "hami"
SHARE_VAR = "HAMI_RAY_SHARE"  # in the worker: the id of the share it runs under
PRELOAD_VAR = "HAMI_RAY_PRELOAD"  # in the worker: the limiter the share preloads
OWN_KEYS = ("share", "task_type", "grant_timeout_s")


class ShareOptions(HamiModel):
    """The keys of the ``hami`` field that are not request-part fields."""

    share: str | None = Field(default=None, min_length=1, description="makes the env (and its allocation) distinct")
    task_type: TaskType = TaskType.BATCH
    grant_timeout_s: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description="how long a refusal that may clear (a finished worker still releasing) is retried",
    )


class ShareSpec:
    """A validated ``hami`` field: the request part, its options, and its canonical form."""

    def __init__(self, part: RequestPart, options: ShareOptions, canonical: str) -> None:
        self.part = part
        self.options = options
        self.canonical = canonical

    @classmethod
    def parse(cls, value: object) -> ShareSpec:
        """``InvalidRequest`` naming ``hami.<field>`` for anything that does not validate."""
        if not isinstance(value, Mapping):
            raise InvalidRequest(FIELD, f"expected a mapping, got {type(value).__name__}")
        raw = dict(value)
        own = {k: raw.pop(k) for k in OWN_KEYS if k in raw}
        try:
            part = RequestPart.model_validate(raw)
            options = ShareOptions.model_validate(own)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{FIELD}.{exc.field}", exc.message) from None
        canonical = json.dumps(
            {**part.model_dump(mode="json", exclude_defaults=True), **options.model_dump(mode="json")},
            sort_keys=True,
        )
        return cls(part, options, canonical)

    @classmethod
    def from_runtime_env(cls, runtime_env: Mapping[str, Any]) -> ShareSpec:
        return cls.parse(runtime_env.get(FIELD))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical.encode()).hexdigest()[:32]

    @property
    def uri(self) -> str:
        """Ray's cache key for this env: one allocation per distinct ``hami`` field."""
        return f"{FIELD}://{self.digest}"

    def request(self) -> ResourceRequest:
        label = self.options.share or self.digest[:12]
        return ResourceRequest(name=f"ray:{label}", task_type=self.options.task_type, parts=[self.part])


def digest_of(uri: str) -> str:
    prefix = f"{FIELD}://"
    if not uri.startswith(prefix):
        raise InvalidRequest("uri", f"not a hami share URI: {uri!r}")
    return uri[len(prefix) :]
