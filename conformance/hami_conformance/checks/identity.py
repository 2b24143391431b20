"""Identity: the adapter's metadata, its probe, and well-formed discovery."""

from __future__ import annotations

from hami_conformance.bench import Bench, device_info_errors, expect
from hami_conformance.checks import check
from hami_conformance.shims import shim_problem
from hami_devices import traits as traits_catalog
from hami_devices.adapter import Capability, Probe
from hami_devices.models import DeviceTraits


@check("identity.adapter")
def adapter_metadata(bench: Bench) -> None:
    adapter = bench.adapter
    name = getattr(adapter, "name", None)
    expect(isinstance(name, str) and name.strip() == name and name, f"adapter name {name!r} is not a non-empty name")
    plugin = bench.target.plugin
    if ":" not in plugin:
        case = " (only in case: names are case-sensitive)" if str(name).lower() == plugin.lower() else ""
        expect(name == plugin, f"adapter name {name!r} differs from its entry point name {plugin!r}{case}")
    expect(isinstance(adapter.version, str) and adapter.version, f"adapter version {adapter.version!r} is not set")
    caps = adapter.capabilities
    expect(isinstance(caps, frozenset | set), f"capabilities must be a frozenset, got {type(caps).__name__}")
    unknown = [c for c in caps if not isinstance(c, Capability)]
    expect(not unknown, f"capabilities {unknown!r} are not hami_devices.plugin.Capability members")
    env = adapter.visible_devices_env
    expect(
        isinstance(env, tuple) and env and all(isinstance(v, str) and v.isidentifier() for v in env),
        f"visible_devices_env must name at least one environment variable, got {env!r}",
    )
    problem = shim_problem(adapter)
    expect(problem is None, str(problem))


@check("identity.probe")
def probe_is_safe(bench: Bench) -> None:
    try:
        probe = bench.adapter.probe()
    except Exception as exc:
        raise AssertionError(f"probe() raised {type(exc).__name__}: {exc}") from exc
    expect(isinstance(probe, Probe), f"probe() returned {type(probe).__name__}, not Probe")
    expect(isinstance(probe.available, bool), f"Probe.available is {probe.available!r}, not a bool")
    expect(isinstance(probe.detail, str) and probe.detail, "Probe.detail must say why the library is (un)usable")


@check("identity.discover")
def discover_is_well_formed(bench: Bench) -> None:
    expect(bench.devices, f"discovery on {bench.target.source} returned no devices")
    for device in bench.devices:
        info = device.info
        errors = device_info_errors(info)
        expect(not errors, f"device {info.uuid}: DeviceInfo does not validate: {errors}")
        expect(
            info.vendor == bench.adapter.name, f"device {info.uuid}: vendor {info.vendor!r} != {bench.adapter.name!r}"
        )
        expect(info.memory_mib > 0, f"device {info.uuid}: memory {info.memory_mib} MiB")
        expect(info.split_count >= 1, f"device {info.uuid}: split count {info.split_count}")
        expect(device.adapter is bench.adapter, f"device {info.uuid} is bound to another adapter instance")
        expect(device.ledger is bench.ledger, f"device {info.uuid} does not use the ledger it was built on")


@check("identity.unique-uuids")
def unique_uuids(bench: Bench) -> None:
    uuids = [d.uuid for d in bench.devices]
    dupes = sorted({u for u in uuids if uuids.count(u) > 1})
    expect(not dupes, f"duplicate device uuids: {dupes}")
    keys = [(d.info.node, d.info.index) for d in bench.devices]
    dupe_keys = sorted({k for k in keys if keys.count(k) > 1})
    expect(not dupe_keys, f"duplicate (node, index) pairs: {dupe_keys}")


@check("identity.type")
def device_type(bench: Bench) -> None:
    for device in bench.devices:
        expected = f"{device.info.vendor}/{device.info.model}"
        expect(device.type == expected, f"device {device.uuid}: type {device.type!r}, expected {expected!r}")


@check("identity.traits")
def traits_known(bench: Bench) -> None:
    for device in bench.devices:
        traits = device.info.traits
        expect(isinstance(traits, DeviceTraits), f"device {device.uuid} ({device.type}) has no DeviceTraits")
        assert traits is not None
        expect(traits.vendor == device.info.vendor, f"device {device.uuid}: traits are for vendor {traits.vendor!r}")
        expect(traits.peak_tflops, f"device {device.uuid}: traits give no peak throughput")


@check("identity.topology")
def topology_scores(bench: Bench) -> None:
    group = bench.same_node_group(2)
    for a in group:
        for b in group:
            if a is b:
                continue
            score = bench.adapter.pair_score(a.info, b.info)
            expect(
                isinstance(score, int) and not isinstance(score, bool) and 0 <= score <= 100,
                f"pair_score({a.uuid}, {b.uuid}) = {score!r}, expected an int 0..100",
            )
            back = bench.adapter.pair_score(b.info, a.info)
            expect(score == back, f"pair_score is not symmetric: {a.uuid}->{b.uuid} {score}, back {back}")


SPEC_LOW, SPEC_HIGH = 0.90, 1.01
"""How far discovered memory may sit from the spec sheet's: vendors report up to a tenth less (memory
reserved for the driver, ECC), and never more than rounding above it.  A unit slip (MB for MiB, 4.9 %
more; GiB for MiB) lies outside."""


def spec_sheet(bench: Bench, vendor: str, model: str) -> DeviceTraits | None:
    """The model's spec sheet: the core traits catalog's, else the one the adapter ships for it."""
    return traits_catalog.find(vendor, model) or bench.adapter.traits_for(model)


@check("identity.spec-sheet")
def against_spec_sheet(bench: Bench) -> None:
    compared = 0
    for device in bench.devices:
        info = device.info
        sheet = spec_sheet(bench, info.vendor, info.model) or info.traits
        if sheet is None:
            continue
        compared += 1
        low, high = int(sheet.memory_mib * SPEC_LOW), int(sheet.memory_mib * SPEC_HIGH)
        expect(
            low <= info.memory_mib <= high,
            f"device {info.uuid} ({info.model}): discovery reports {info.memory_mib} MiB, its spec sheet "
            f"{sheet.memory_mib} MiB (a device shows {low}..{high}): a unit slip, or another device's figure",
        )
    expect(compared, "no discovered device has a spec sheet (traits catalog, traits_for or DeviceInfo.traits)")
