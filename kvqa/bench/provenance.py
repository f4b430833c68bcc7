"""Where a measurement came from, for the JSON that scripts/, experiments/ and the bench write beside their figures:
the commit of the kvqa that made it, and the machine's CPU."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path


def commit_of(folder: Path) -> str:
    """The commit checked out where `folder` (kvqa's package) lies, with " (kvqa/ changed since)" when files under it
    differ from that commit; "unknown (not a git checkout)" elsewhere (an exported copy, an installed package)."""
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + (" (kvqa/ changed since)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
