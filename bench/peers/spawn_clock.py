"""When this process was spawned, for the peers' wall-clock budgets: imported
first thing, so that the imports count as start-up, as apex's launch does."""

import os
import time

T_TOP = time.time()


def _process_start_time() -> float | None:
    """Unix time the kernel started this process, or None: its age (/proc/uptime less
    /proc/self/stat starttime, both since boot, 10 ms ticks) before now. (btime in
    /proc/stat is whole seconds: boot time + starttime, as psutil's create_time does
    it, can be up to 1 s early.)"""
    try:
        now = time.time()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        with open("/proc/self/stat") as f:
            # the fields after the command name, which is in parentheses
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of proc(5), starttime, in clock ticks
        return now - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


_PROC_START = _process_start_time()
# Trust /proc only when it is before this module's import, and not by much.
T_SPAWN = _PROC_START if _PROC_START is not None and 0 <= T_TOP - _PROC_START < 5 else T_TOP
