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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_MAX = -4


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
