"""What a request part that omits its count, cores or memory gets: the scheduler's defaults.

HAMi fills a container that names a device count and nothing else with
``defaultMem`` (0: the whole device), ``defaultCores`` and, for one that names
only memory or cores, ``defaultGPUNum`` devices.  ``RequestDefaults`` does the same
for any request: a field the part did not set (pydantic's ``model_fields_set``)
takes the default; a field it set, even to the built-in value, keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.models.requests import RequestPart, ResourceRequest


@dataclass(frozen=True)
class RequestDefaults:
    """``memory_mib`` (0: the whole device, as HAMi) or ``memory_percent``, ``cores`` and ``count``."""

    memory_mib: int = 0
    memory_percent: float | None = None
    cores: int = 0
    count: int = 1

    @classmethod
    def parse_memory(cls, value: int | str, cores: int = 0, count: int = 1) -> RequestDefaults:
        """From ``scheduler.default-memory``: MiB, or a percent of the device such as ``"50%"``."""
        if isinstance(value, str):
            return cls(0, float(value.rstrip("%")), cores, count)
        return cls(value, None, cores, count)

    @property
    def identity(self) -> bool:
        """Whether these are the built-in values, so that applying them changes nothing."""
        return self.memory_mib == 0 and self.memory_percent is None and self.cores == 0 and self.count == 1

    def part(self, part: RequestPart) -> RequestPart:
        given = part.model_fields_set
        update: dict[str, object] = {}
        if "count" not in given and part.count != self.count:
            update["count"] = self.count
        if "cores" not in given and part.cores != self.cores:
            update["cores"] = self.cores
        if not part.gives_memory:
            if self.memory_percent is not None:
                update["memory_percent"] = self.memory_percent
            elif self.memory_mib > 0:
                update["memory_mib"] = self.memory_mib
        return part.model_copy(update=update) if update else part

    def apply(self, request: ResourceRequest) -> ResourceRequest:
        """``request`` with every part's omitted fields filled (the same object when nothing changes)."""
        if self.identity or not request.parts:
            return request
        parts = [self.part(p) for p in request.parts]
        if all(a is b for a, b in zip(parts, request.parts, strict=True)):
            return request
        return request.model_copy(update={"parts": parts})
