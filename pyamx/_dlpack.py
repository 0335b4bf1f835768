"""Arrays of other frameworks (torch, JAX, ...) read through DLPack: their memory, no copy.

numpy's own ``np.from_dlpack`` (numpy >= 1.23, pyamx's floor) does the import. What it cannot
do is hold the 16- and 8-bit float formats it has no dtype for: a ``torch.bfloat16`` tensor is
"Unsupported dtype in DLTensor" there. pyamx reads those as bits anyway: it takes the capsule
itself, and where its dtype is one of :data:`BITS_DTYPES` it relabels the tensor as unsigned
integers of the same width before numpy sees it, so numpy builds a uint16 (uint8) view of the
same memory and owns the capsule as usual (it calls the producer's deleter). The caller gets the
bits and the dtype name they are of. Nothing here imports a framework: only the protocol's two
methods are called on the object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

if TYPE_CHECKING:
    import ctypes

    from typing_extensions import CapsuleType, TypeGuard


class Producer(Protocol):
    """A DLPack producer as pyamx calls it: a legacy capsule (no arguments) and where it lives."""

    def __dlpack__(self, /, *, stream: None = None) -> CapsuleType: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


#: DLPack type codes (dlpack.h, DLDataTypeCode)
_UINT, _BFLOAT = 1, 4
_FLOAT8_E4M3FN, _FLOAT8_E5M2 = 10, 12  # DLPack 1.1
#: (code, bits) -> the name (ml_dtypes') of a format numpy has no dtype for, read as unsigned bits
BITS_DTYPES = {(_BFLOAT, 16): "bfloat16", (_FLOAT8_E5M2, 8): "float8_e5m2", (_FLOAT8_E4M3FN, 8): "float8_e4m3fn"}
#: DLPack device types whose memory numpy can read: CPU, CUDA host (pinned), ROCm host, CUDA managed
_HOST_DEVICES = {1: "cpu", 3: "cuda_host", 11: "rocm_host", 13: "cuda_managed"}
_DEVICE_NAMES = {2: "cuda", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm", 12: "ext_dev", 14: "oneapi",
                 15: "webgpu", 16: "hexagon", 17: "maia"}
#: why an ``out=`` numpy imported read-only cannot be written: numpy before 2.2.5 imports every DLPack
#: array read-only, later ones a legacy capsule and a versioned one its producer marks read-only
READ_ONLY_NOTE = ("numpy imports DLPack arrays read-only before 2.2.5 (this is numpy "
                  f"{np.__version__}), and later too where the producer marks them read-only (JAX does)")


def exports(x: object) -> TypeGuard[Producer]:
    """Whether ``x`` is a DLPack producer pyamx imports that way (an ndarray is taken as it is)."""
    return not isinstance(x, np.ndarray) and hasattr(type(x), "__dlpack__") and hasattr(type(x), "__dlpack_device__")


class _Capsule:
    """Hands numpy a capsule already taken from the producer (relabelled where it had to be)."""

    def __init__(self, capsule: CapsuleType, device: tuple[int, ...]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, *args: object, **kwargs: object) -> CapsuleType:
        # Whatever numpy asks (max_version...), this is a legacy capsule, which every numpy takes.
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, ...]:
        return self._device


def _refuse(x: object, what: str, fn: str, name: str) -> TypeError:
    return TypeError(f"{fn}: {name} ({type(x).__name__}) cannot be read through DLPack: {what}")


def _device(x: Producer, name: str, fn: str) -> tuple[int, ...]:
    try:
        device = tuple(x.__dlpack_device__())
        device_type = int(device[0])
    except Exception as exc:
        raise _refuse(x, f"__dlpack_device__() failed: {exc}", fn, name) from None
    if device_type not in _HOST_DEVICES:
        where = _DEVICE_NAMES.get(device_type, f"DLPack device type {device_type}")
        raise _refuse(x, f"it lives on {where} memory, and pyamx reads host memory only: "
                         "copy it to the CPU first (torch: t.cpu(), JAX: jax.device_put(x, jax.devices('cpu')[0]))",
                      fn, name)
    return device


def _dltensor(capsule: CapsuleType) -> Any:  # a ctypes DLTensor (defined in _capsule_api), or None
    """The capsule's DLTensor (a ctypes view of the producer's struct), or None for a capsule not
    of the legacy kind (a versioned one: numpy reads those itself)."""
    is_valid, get_pointer, layout = _capsule_api()
    if not is_valid(capsule, b"dltensor"):
        return None
    pointer = get_pointer(capsule, b"dltensor")
    assert pointer is not None  # PyCapsule_IsValid: the capsule's pointer is not NULL
    return layout.from_address(pointer)


_CAPSULE_API: tuple[Callable[[object, bytes], int], Callable[[object, bytes], int | None],
                    type[ctypes.Structure]] | None = None


def _capsule_api() -> tuple[Callable[[object, bytes], int], Callable[[object, bytes], int | None],
                            type[ctypes.Structure]]:
    """(PyCapsule_IsValid, PyCapsule_GetPointer, dlpack.h's DLTensor) through ctypes, built once.

    ctypes only for a DLPack operand: the one way to read a capsule without a compiled helper. The
    functions get prototypes of their own (ctypes.pythonapi's shared ones are left as they are).
    DLTensor is the first member of the legacy DLManagedTensor, which the capsule points to.
    """
    global _CAPSULE_API
    if _CAPSULE_API is None:
        import ctypes

        class DLDataType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                        ("ndim", ctypes.c_int32), ("dtype", DLDataType), ("shape", ctypes.c_void_p),
                        ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]

        api = ctypes.pythonapi
        is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", api))
        get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", api))
        _CAPSULE_API = (is_valid, get_pointer, DLTensor)
    return _CAPSULE_API


def import_array(x: Producer, name: str, fn: str) -> tuple[np.ndarray, str | None]:
    """``x``'s memory as a (read-only) ndarray through DLPack, no copy, and the dtype name its bits
    are of where numpy has none (``"bfloat16"``, ``"float8_e5m2"``, ``"float8_e4m3fn"``: the array
    then holds them as uint16/uint8), else None.

    Every failure is a TypeError naming the operand and what the producer or numpy said (a torch
    tensor that requires grad: "use tensor.detach()"; memory on a GPU: copy it to the CPU).
    """
    device = _device(x, name, fn)
    try:
        capsule = x.__dlpack__()  # no arguments: a legacy capsule, as numpy 1.23 asks
    except Exception as exc:
        raise _refuse(x, f"{type(exc).__name__}: {exc}", fn, name) from None
    carried = None
    tensor = _dltensor(capsule)
    if tensor is not None:
        dtype = tensor.dtype
        carried = BITS_DTYPES.get((dtype.code, dtype.bits)) if dtype.lanes == 1 else None
        if carried is not None:
            dtype.code = _UINT  # the capsule is not consumed yet: its DLTensor is ours to relabel
    try:
        array = np.from_dlpack(_Capsule(capsule, device))
    except Exception as exc:
        raise _refuse(x, f"numpy {np.__version__} refused it ({type(exc).__name__}: {exc})", fn, name) from None
    return array, carried


def import_writable(x: Producer, name: str, fn: str) -> np.ndarray:
    """``x``'s memory as a writable ndarray through numpy's own DLPack import (which keeps the
    producer's read-only flag), or a TypeError saying why it cannot be written."""
    _device(x, name, fn)
    try:
        array = np.from_dlpack(x)
    except Exception as exc:
        raise TypeError(f"{fn}: {name} ({type(x).__name__}) cannot be written through DLPack: numpy "
                        f"{np.__version__} refused it ({type(exc).__name__}: {exc}); a torch.bfloat16 tensor "
                        "takes bf16 bits through t.view(torch.int16)") from None
    if not array.flags.writeable:
        raise TypeError(f"{fn}: {name} ({type(x).__name__}) cannot be written through DLPack: {READ_ONLY_NOTE}; "
                        "pass a numpy array (a CPU torch tensor's t.numpy() is one, on the same memory)")
    return array
