"""kvqa's C kernels (int8_matmul.c, decode_attention.c), built for the CPU they run on at first use and kept.

Each is compiled with `cc -O3 -march=native -fopenmp` (about a second) into the cache folder's `kernels/`, one file
per source, compiler and CPU (a build for one CPU's vector units may not run on another's), built aside and renamed
so a reader never sees half a file. They are called through ctypes on torch's own OpenMP runtime (the build links
libgomp.so.1, the one torch has loaded). Where none can be built (no compiler, no AVX2) the callers run torch's
kernels and say why (kvqa.model.kernels.int8_kernel, kvqa.model.kernels.decode_attention; `kvqa doctor` names what
runs).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from kvqa.config import default_cache_dir

BUILD_SECONDS = 120


def _cpuinfo(field: str) -> str:
    """The first line of /proc/cpuinfo that starts with `field` ("" where there is none)."""
    try:
        return next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith(field)), "")
    except OSError:
        return ""


def cpu_signature() -> str:
    """What a build made with -march=native depends on: the machine and its CPU's flags."""
    return f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} {_cpuinfo('flags')}"


def cpu_vendor() -> str:
    """The CPU's maker as /proc/cpuinfo names it ("GenuineIntel", "AuthenticAMD"; "" where it says none)."""
    return _cpuinfo("vendor_id").partition(":")[2].strip()


def cpu_has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists `flag` ("avx512_vnni") among this CPU's."""
    return flag in _cpuinfo("flags").partition(":")[2].split()


def vector_cpu() -> bool:
    """Whether this is what kvqa's C kernels are written for: an x86-64 CPU with AVX2 or AVX-512."""
    return platform.machine() == "x86_64" and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def build(source: Path, folder: Path | None = None, compiler: str | None = None, flags: tuple[str, ...] = ()) -> Path:
    """The shared library built from `source` for this CPU, with extra compiler `flags` (built now unless already in
    `folder`, default: the cache folder's kernels/). Raises OSError or subprocess.SubprocessError when it cannot be
    built."""
    name = compiler or os.environ.get("CC") or "cc"
    compiler = shutil.which(name)
    if compiler is None:
        raise FileNotFoundError(f"no C compiler {name!r} found; install one (Debian: gcc) or set CC to one")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    signature = f"{version} {cpu_signature()} {' '.join(flags)}"
    key = hashlib.sha256(source.read_bytes() + signature.encode()).hexdigest()[:16]
    folder = folder or default_cache_dir() / "kernels"
    path = folder / f"{source.stem}-{key}.so"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:  # built aside, then renamed: never half a file
        built = Path(scratch) / path.name
        subprocess.run([compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", *flags, "-o", str(built),
                        str(source)], check=True, capture_output=True, text=True, timeout=BUILD_SECONDS)
        os.replace(built, path)
    return path


def build_failure(error: Exception) -> str:
    """What a failed build() said, short enough for a log line."""
    return str(getattr(error, "stderr", "") or error).strip()[:500]


def built_or(source: Path, load: Callable[[Path], object], fallback, *, env: str, log: logging.Logger, failed: str,
             flags: tuple[str, ...] = ()):
    """load(build(source, flags=flags)) on an x86 CPU with AVX2 or AVX-512 where it builds, else `fallback`: also
    where the environment variable `env` is "torch"; a failed build logged once as `failed` and what the compiler
    said."""
    if os.environ.get(env) == "torch" or not vector_cpu():
        return fallback
    try:
        return load(build(source, flags=flags))
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("kvqa: %s: could not build kvqa's (%s)", failed, build_failure(e))
        return fallback
