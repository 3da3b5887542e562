"""Keep freed memory and built kernels in the process while translating or training (glibc on Linux; elsewhere
nothing for the memory).

Every decoding step allocates and frees tensors of tens of megabytes: the logits of all beams over the
vocabulary, their fp32 copy, the log-probabilities; every training update does the same with its activations
and gradients. By default glibc hands such blocks back to the kernel when they are freed (mmap above its
threshold, trimming the top of the heap), so the next step faults them back in page by page, zero-filled: a
sizeable share of a search's time, and of a training update's, goes to those page faults
(benchmarks/RESULTS.md, decoding_levers and train_vs_fairseq). PyTorch's CPU performance guide suggests
preloading jemalloc or tcmalloc for this; asking glibc to keep what it frees needs nothing installed. The
cost: the process keeps its peak heap until it exits, or until it calls :func:`release_freed_memory` (nmt-serve
does when idle after a burst, which it would otherwise hold for good).

The same holds for the kernels oneDNN builds for bf16 products, one per shape: its cache keeps 1,024, and
decoding test2016 needs more (the attention's shapes change with the rows left and the length so far), so a
bf16 search kept building the kernels it had just evicted. Each build costs time and leaves memory behind
even when its kernel is evicted (docs/generation.md), so a larger cache is both faster and smaller.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Any

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_MAX = -4
KERNEL_CACHE_CAPACITY = 8192  # oneDNN's default is 1,024


def _glibc(function: str) -> Any:
    """The C library's ``function``, or None off Linux or where the library has none (musl has no mallopt)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Make glibc serve large blocks from the heap and never trim it. True if it took effect."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def release_freed_memory() -> bool:
    """Hand the pages of every freed block, in every thread's arena, back to the system (glibc's malloc_trim):
    what ``keep_freed_memory`` keeps. True if some memory was released."""
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    return bool(trim(0))


def keep_built_kernels() -> None:
    """Let oneDNN keep up to KERNEL_CACHE_CAPACITY built kernels (unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set).
    oneDNN reads the variable when it builds its first kernel, so this runs before any bf16 product."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(KERNEL_CACHE_CAPACITY))
