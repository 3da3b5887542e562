"""What a compiled package is built for: the torch version that compiled it and the CPU it was compiled on.

AOTInductor writes native code with ``-march=native`` against this torch's C++ ABI: run on a CPU without one of
the instructions it was compiled for it dies of an illegal instruction, and another torch may not even load it.
So an export records this machine (:func:`this_machine`) and loading compares it first (:func:`mismatch`),
before a byte of native code is mapped, and refuses in one line."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Mapping, Optional

import torch

# /proc/cpuinfo flags that name instruction-set extensions a compiler may emit (the others describe the
# hypervisor, caches or power management, and differ between hosts of one CPU model)
ISA_PREFIXES = ("avx", "amx", "sse", "ssse", "fma", "f16c", "bmi", "vaes", "vpclmulqdq", "gfni", "sha", "aes",
                "movbe", "popcnt", "abm", "adx", "lzcnt", "xop", "asimd", "sve", "neon", "fp16", "bf16", "i8mm")
CPUINFO = Path("/proc/cpuinfo")
KEYS = ("torch", "machine", "cpu", "cpu_flags")  # what engine.json and the trust record store of a build


def _cpuinfo() -> tuple[str, list[str]]:
    """(the CPU's model name, its instruction-set flags) from /proc/cpuinfo; ("", []) where there is none."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", []
    model, flags = "", list[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if not model and key in ("model name", "cpu model", "hardware"):
            model = " ".join(value.split())
        elif not flags and key in ("flags", "features"):
            flags = value.split()
        if model and flags:
            break
    return model, sorted({f for f in flags if f.startswith(ISA_PREFIXES)})


def this_machine() -> dict[str, str]:
    """This process's torch version, machine type, CPU model and instruction-set flags (space-separated)."""
    model, flags = _cpuinfo()
    capability = torch.backends.cpu.get_cpu_capability()  # what torch's own kernels dispatch on
    return {"torch": torch.__version__, "machine": platform.machine(),
            "cpu": model or platform.processor() or "unknown", "cpu_flags": " ".join(flags) or capability}


def mismatch(built: Mapping[str, object], here: Mapping[str, str]) -> Optional[str]:
    """Why a package built on ``built`` (engine.json's or the trust record's facts) cannot run ``here``
    (:func:`this_machine`), as a clause for a one-line message; None when it can."""
    if built.get("torch") != here["torch"]:
        return f"it was compiled by torch {built.get('torch')} and this is torch {here['torch']}"
    if built.get("machine") != here["machine"] or built.get("cpu") != here["cpu"]:
        return (f"it was compiled for a {built.get('machine')} CPU {built.get('cpu')!r} and this one is a "
                f"{here['machine']} {here['cpu']!r}")
    flags = built.get("cpu_flags")
    missing = sorted(set(flags.split()) - set(here["cpu_flags"].split())) if isinstance(flags, str) else ["?"]
    if missing:
        shown = " ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
        return f"it was compiled for instructions this CPU lacks ({shown})"
    return None
