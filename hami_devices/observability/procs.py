"""Is a process (identified by pid and start time, as the limiter's slots are) still running on this machine?"""

from __future__ import annotations

import os
from functools import cache


@cache
def own_pid_namespace() -> int:
    """Inode of this process's PID namespace (0 when /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot); ``None`` if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None
    return int(fields[19])


def alive(pid: int, started: int) -> bool:
    """The same process still runs (a reused pid has another start time)."""
    return start_time(pid) == started


def local_pid(pid: int, host_pid: int, pid_namespace: int) -> int | None:
    """The pid under which this machine's /proc shows a workload process, or ``None`` when it cannot be
    known (another PID namespace, and the limiter did not learn the host's pid)."""
    if host_pid:
        return host_pid
    if pid_namespace in (0, own_pid_namespace()):
        return pid
    return None


@cache
def _boot_time() -> float | None:
    """When this machine booted (``btime`` of /proc/stat), Unix seconds."""
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def started_at(start_ticks: int) -> float | None:
    """The wall-clock time a process started, from its start time in clock ticks after boot (the same in
    every PID namespace); ``None`` when not known."""
    boot = _boot_time()
    if boot is None or start_ticks <= 0:
        return None
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")
