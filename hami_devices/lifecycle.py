"""Allocation lifecycle: what is allocated, who is using it, and cleaning up after workloads that are gone.

The ledger says which allocations exist; their limiter regions say which processes use them and how much
memory they hold.  ``list_allocations`` joins the two.  ``collect_garbage`` releases allocations whose
workloads have all died (opt-in: only when asked, and only past a grace period, since an allocation whose
workload has not started yet looks the same) and removes region files no allocation owns.

Liveness is the limiter's: a process is alive while it holds its slot's lock in the region, which holds
across PID namespaces and containers.  An allocation without a region (no limiter) cannot be judged and is
never collected.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hami_devices import limiter
from hami_devices.errors import AllocationInUse, InvalidRequest, LimiterError, UnknownAllocation
from hami_devices.isolation import by_pid, process_name
from hami_devices.ledger.events import Event, EventKind
from hami_devices.models import DeviceHandle

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger

logger = logging.getLogger("hami_devices.lifecycle")

MIB = 1024 * 1024
ORPHAN_MIN_AGE_S = 30.0
"""A region file appears just before its allocation is committed to the ledger: one younger than this is
never taken for an orphan, whatever the grace period."""

State = Literal["running", "idle", "unknown"]


@dataclass(frozen=True)
class DeviceUsage:
    """One device of an allocation, as its region accounts it."""

    vendor: str
    slot: int  # position among the allocation's devices of this vendor (the shim's device number)
    uuid: str | None
    memory_limit_mib: float
    memory_used_mib: float
    memory_peak_mib: float
    core_limit: int
    core_policy: str  # the region's: "cap" (at most core_limit) or "share" (at least it, idle time on top)
    utilization_pct: float | None


@dataclass(frozen=True)
class ProcessUsage:
    """One process registered in an allocation's region."""

    vendor: str
    pid: int  # in its own PID namespace
    host_pid: int
    pid_namespace: int
    alive: bool
    memory_used_mib: dict[str, float]  # device uuid (or slot number) -> MiB


@dataclass(frozen=True)
class AllocationStatus:
    handle: DeviceHandle
    age_s: float
    devices: list[DeviceUsage] = field(default_factory=list)
    processes: list[ProcessUsage] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # regions that could not be read

    @property
    def live_processes(self) -> int:
        return sum(p.alive for p in self.processes)

    @property
    def live_pids(self) -> list[str]:
        """The live processes' pids as this machine numbers them (with a container's own pid where it differs)."""
        return by_pid({process_name(p.pid, p.host_pid) for p in self.processes if p.alive})

    @property
    def state(self) -> State:
        """``running``: a live process uses it; ``idle``: its regions show none; ``unknown``: no readable region."""
        if self.live_processes:
            return "running"
        if not self.handle.regions or self.errors:
            return "unknown"
        return "idle"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.handle.id,
            "name": self.handle.request.name,
            "node": self.handle.host,
            "metadata": dict(self.handle.metadata),
            "created_at": self.handle.created_at,
            "age_s": round(self.age_s, 3),
            "state": self.state,
            "grants": [g.model_dump(mode="json") for g in self.handle.grants],
            "regions": dict(self.handle.regions),
            "usage": [vars(d) for d in self.devices],
            "processes": [vars(p) for p in self.processes],
            "errors": list(self.errors),
        }


def _read_region(
    handle: DeviceHandle, group: str, path: str, status: AllocationStatus, *, reclaim: bool
) -> None:
    node, _, vendor = group.rpartition("/")  # regions are per (node, vendor) group
    uuids = [g.uuid for g in handle.grants if g.vendor == vendor and g.node == node]
    try:
        with limiter.Region.open(path) as region:
            if reclaim:
                region.reclaim_dead()  # a process that is gone holds nothing: usage is what the living hold
            usage = region.device_usage()
            records = region.process_usage()
    except (LimiterError, OSError) as exc:
        status.errors.append(f"{vendor} region {path}: {exc}")
        return
    for record in usage[: len(uuids)]:
        status.devices.append(
            DeviceUsage(
                vendor=vendor,
                slot=record.device,
                uuid=uuids[record.device],
                memory_limit_mib=record.memory_limit_bytes / MIB,
                memory_used_mib=record.memory_used_bytes / MIB,
                memory_peak_mib=record.memory_peak_bytes / MIB,
                core_limit=record.core_limit_pct,
                core_policy=record.core_policy,
                utilization_pct=record.utilization_pct,
            )
        )
    by_process: dict[tuple[int, int, int], list[limiter.ProcessRecord]] = {}
    for rec in records:
        by_process.setdefault((rec.pid, rec.pid_namespace, rec.start_time), []).append(rec)
    for recs in by_process.values():
        first = recs[0]
        status.processes.append(
            ProcessUsage(
                vendor=vendor,
                pid=first.pid,
                host_pid=first.host_pid,
                pid_namespace=first.pid_namespace,
                alive=first.alive,
                memory_used_mib={
                    (uuids[r.device] if r.device < len(uuids) else str(r.device)): r.memory_used_bytes / MIB
                    for r in recs
                },
            )
        )


def allocation_status(handle: DeviceHandle, *, now: float | None = None, reclaim: bool = True) -> AllocationStatus:
    """Age, per-device usage and processes of one allocation, from its limiter regions."""
    now = time.time() if now is None else now
    status = AllocationStatus(handle=handle, age_s=max(0.0, now - handle.created_at))
    for group, path in sorted(handle.regions.items()):
        _read_region(handle, group, path, status, reclaim=reclaim)
    return status


def list_allocations(ledger: Ledger, *, now: float | None = None) -> list[AllocationStatus]:
    """Every live allocation of the ledger, oldest first."""
    handles = sorted(ledger.handles(), key=lambda h: (h.created_at, h.id))
    return [allocation_status(h, now=now) for h in handles]


# ---- garbage collection ----


@dataclass(frozen=True)
class GcAction:
    kind: Literal["release", "remove-region"]
    target: str  # handle id, or region file path
    reason: str
    done: bool  # False in a dry run, or when it failed (see error)
    error: str | None = None


@dataclass
class GcReport:
    dry_run: bool
    grace_s: float
    actions: list[GcAction] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (handle id or path, why it stays)

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "grace_s": self.grace_s,
            "actions": [vars(a) for a in self.actions],
            "kept": [{"target": t, "reason": r} for t, r in self.kept],
        }


def _why_kept(status: AllocationStatus, grace_s: float) -> str | None:
    """None when the allocation may be released."""
    if not status.handle.regions:
        return "no limiter region: cannot tell whether its workload runs"
    if status.errors:
        return "region unreadable: " + "; ".join(status.errors)
    if status.live_processes:
        return f"{status.live_processes} live process(es): {', '.join(status.live_pids)}"
    if status.age_s < grace_s:
        return f"no live process, but younger than the grace period ({status.age_s:.0f} s < {grace_s:.0f} s)"
    return None


def _release(
    ledger: Ledger, status: AllocationStatus, adapters: Mapping[str, VendorAdapter], report: GcReport
) -> None:
    from hami_devices.allocation import release_from

    handle = status.handle
    exited = sum(not p.alive for p in status.processes)
    # (Dead processes' slots are reclaimed whenever a region is read, so "exited" counts only the latest.)
    reason = "no live workload process" + (f" ({exited} exited)" if exited else "") + f", age {status.age_s:.0f} s"
    if report.dry_run:
        report.actions.append(GcAction("release", handle.id, reason, done=False))
        return
    # A workload may have started since the listing: look once more, just before releasing.
    again = allocation_status(handle, reclaim=False)
    if again.live_processes or again.errors:
        report.kept.append((handle.id, _why_kept(again, 0.0) or "changed while collecting"))
        return
    try:
        # the allocation.released event commits with the release and carries why gc took it
        release_from(ledger, handle.id, adapters, reason=f"gc: {reason}")
    except UnknownAllocation as exc:  # released by someone else meanwhile
        report.actions.append(GcAction("release", handle.id, reason, done=False, error=str(exc)))
        return
    except AllocationInUse as exc:  # a workload process registered since: gc never releases from under one
        report.kept.append((handle.id, f"{len(exc.pids)} live process(es): {', '.join(exc.pids)}"))
        return
    logger.info("released allocation %s: %s", handle.id, reason)
    report.actions.append(GcAction("release", handle.id, reason, done=True))


def _orphans(folder: Path, owned: set[Path], now: float, min_age_s: float) -> Iterable[tuple[Path, str, bool]]:
    """Region files (and leftovers of interrupted creations) in ``folder`` that no allocation owns:
    (path, why, whether it may be removed)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for path in entries:
        if not (path.name.endswith(".region") or ".region.tmp." in path.name):
            continue
        if path.resolve() in owned:
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        age = now - st.st_mtime
        if age < min_age_s:
            continue
        if ".region.tmp." in path.name:
            yield path, f"leftover of an interrupted region creation, {age:.0f} s old", True
            continue
        try:
            with limiter.Region.open(path) as region:
                live = sum(r.alive for r in region.process_usage() if r.device == 0)
        except (LimiterError, OSError):
            yield path, f"no allocation owns it and it is not a usable region, {age:.0f} s old", True
            continue
        if live:  # an allocation of another ledger, or a region a shim made for itself
            yield path, f"no allocation of this ledger owns it, but {live} live process(es) use it", False
        else:
            yield path, f"no allocation owns it and no live process uses it, {age:.0f} s old", True


def collect_garbage(
    ledger: Ledger,
    adapters: Mapping[str, VendorAdapter],
    *,
    grace_s: float,
    dry_run: bool = False,
    region_folder: Path | None = None,
    now: float | None = None,
) -> GcReport:
    """Release allocations older than ``grace_s`` whose workloads are all gone; remove orphaned region files.

    With ``dry_run`` nothing is changed and the report says what would be.
    """
    if grace_s < 0:
        raise InvalidRequest("grace_s", f"grace period {grace_s} s is negative")
    now = time.time() if now is None else now
    report = GcReport(dry_run=dry_run, grace_s=grace_s)
    statuses = list_allocations(ledger, now=now)
    survivors: set[Path] = set()
    for status in statuses:
        why = _why_kept(status, grace_s)
        if why is None:
            _release(ledger, status, adapters, report)
        else:
            report.kept.append((status.handle.id, why))
        if why is not None or dry_run:
            survivors.update(Path(p).resolve() for p in status.handle.regions.values())
    # the folder as configured, not created: where there is none there is nothing to collect
    folder = region_folder if region_folder is not None else limiter.region_dir_path()
    for path, reason, removable in _orphans(folder, survivors, now, max(grace_s, ORPHAN_MIN_AGE_S)):
        if not removable:
            report.kept.append((str(path), reason))
            continue
        if dry_run:
            report.actions.append(GcAction("remove-region", str(path), reason, done=False))
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            report.actions.append(GcAction("remove-region", str(path), reason, done=False, error=exc.strerror))
            continue
        # after the fact: a file removal is no ledger change to share a transaction with
        ledger.record_event(Event(kind=EventKind.REGION_REMOVED, data={"path": str(path), "reason": reason}))
        logger.info("removed region file %s: %s", path, reason)
        report.actions.append(GcAction("remove-region", str(path), reason, done=True))
    return report
