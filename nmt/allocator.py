"""Keep freed memory in the process while translating or training (glibc on Linux; elsewhere nothing).

Every decoding step allocates and frees tensors of tens of megabytes: the logits of all beams over
the vocabulary, their fp32 copy, the log-probabilities; every training update does the same with
its activations and gradients. By default glibc hands such blocks back to the kernel when they are
freed (mmap above its threshold, trimming the top of the heap), so the next step faults them back
in page by page, zero-filled. On Multi30k test, beam 5, that was ~900k page faults and 15-20% of
the search time (docs/generation.md); training the fairseq reference shape got 8-14% more tokens per
second with the same peak memory (docs/training.md). PyTorch's CPU performance guide suggests
preloading jemalloc or tcmalloc for this; asking glibc to keep what it frees needs nothing
installed. The cost: the process keeps its peak heap until it exits.

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

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_MAX = -4
KERNEL_CACHE_CAPACITY = 8192  # oneDNN's default is 1,024


def keep_freed_memory() -> bool:
    """Make glibc serve large blocks from the heap and never trim it. True if it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # no C library found, or not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def keep_built_kernels() -> None:
    """Let oneDNN keep up to KERNEL_CACHE_CAPACITY built kernels (unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set).
    oneDNN reads the variable when it builds its first kernel, so this runs before any bf16 product."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(KERNEL_CACHE_CAPACITY))
