"""A compiled package's model called through its C interface, with Python's lock (the GIL) released while it runs.

torch's package loader (``torch._C._aoti.AOTIModelPackageLoader``) holds the GIL for the whole call, so in nmt-serve
the search thread's compiled steps keep the HTTP thread from reading requests and writing answers. The package's one
shared library exports AOTInductor's C functions (make a container of the model, run it, count its outputs), and a
call through ctypes releases the GIL as every foreign call does. Tensors cross as AtenTensorHandles that torch's own
helpers make from tensors (the container takes them) and turn back into tensors (taking the container's).

Used for packages of the form nmt-export writes (the weights inside the library, no operator that needs torch's
proxy executor); any other package, or a library without these functions, is left to torch's loader.
"""

from __future__ import annotations

import _ctypes
import ctypes
import weakref
import zipfile
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import Tensor

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer  # the AtenTensorHandle a torch helper wrapped in a capsule
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New  # and back, for the helper that takes the handles over
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _library(package: Path, private_dir: Path) -> Optional[str]:
    """The package's shared library, extracted into ``private_dir``; None for a package of another form: more than
    one library, weights beside it, or a description of operators that the proxy executor runs."""
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        libraries = [n for n in names if n.endswith(".so")]
        weights = [n for n in names if "/data/weights/" in n]
        operators = [n for n in names if n.endswith(".json") and not n.endswith("_metadata.json")]
        if len(libraries) != 1 or weights or operators:
            return None
        return archive.extract(libraries[0], private_dir)


def open_released(package: Path, private_dir: Path) -> Optional[Callable[[list[Tensor]], list[Tensor]]]:
    """The model in ``package`` (a .pt2 on the CPU) as a function from its input tensors to its outputs that runs with
    the GIL released; None when the package or its library is not of the form this calls (use torch's loader)."""
    path = _library(package, private_dir)
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)  # its code is mapped now: the file can go with private_dir
        create = lib.AOTInductorModelContainerCreateWithDevice
        run = lib.AOTInductorModelContainerRun
        count = lib.AOTInductorModelContainerGetNumOutputs
        delete = lib.AOTInductorModelContainerDelete
    except (OSError, AttributeError):
        return None
    container = ctypes.c_void_p()
    if create(ctypes.byref(container), ctypes.c_size_t(1), b"cpu", None) != 0:  # one model: calls take turns
        return None
    outputs = ctypes.c_size_t()
    if count(container, ctypes.byref(outputs)) != 0:
        delete(container)
        return None
    n_out = outputs.value

    def call(inputs: list[Tensor]) -> list[Tensor]:
        capsules = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors(inputs)  # new handles: the container takes them
        handles = (ctypes.c_void_p * len(capsules))(*(_get_pointer(c, None) for c in capsules))
        results = (ctypes.c_void_p * n_out)()
        if run(container, handles, ctypes.c_size_t(len(capsules)), results, ctypes.c_size_t(n_out), None, None):
            raise RuntimeError("the compiled package failed on these inputs (its message is above)")
        return torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs([_new_capsule(h, None, None) for h in results])

    weakref.finalize(call, _close, delete, container, lib)  # a server that unloads a model frees its weights
    return call


def _close(delete: Callable[[ctypes.c_void_p], int], container: ctypes.c_void_p, lib: ctypes.CDLL) -> None:
    """Free the model's container, then unmap its library (ctypes itself never does)."""
    delete(container)
    _ctypes.dlclose(lib._handle)
