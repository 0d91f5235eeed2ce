"""A fake CUDA device for rehearsing the GPU path on a machine without one.

Inside :func:`fake_cuda` a tensor moved to ``"cuda"`` (``.to("cuda")``, ``.cuda()``, a module's ``.to``, a factory
with ``device="cuda"``) becomes a :class:`FakeCudaTensor`: its data stays on the CPU, but its ``.device`` says
``cuda:N`` and every operation checks devices as CUDA would -- it raises where real CUDA raises:

* an operation mixing a CUDA tensor with a CPU tensor that is not a 0-dim scalar, or tensors on two CUDA devices;
* a CPU tensor indexed with a CUDA index (``cpu[cuda_mask]``, ``cpu[cuda_mask] = ...``);
* CPU values (not a 0-dim scalar) written into a CUDA tensor through advanced indexing: ``cuda[:, mask] = cpu``,
  ``cuda[[0, 2]] = cpu``, ``index_put_`` (CUDA's index_put checks its values' device; 12_mllm crashed there on an
  H200), ``masked_scatter_``, ``index_copy_`` / ``index_add_`` / ``scatter_`` with a CPU source. Basic indexing
  (``cuda[0:2] = cpu``) and ``cuda_view.copy_(cpu)`` are host-to-device copies, which CUDA performs, so they pass;
* ``.numpy()`` on a CUDA tensor.

Attention kernels CUDA has and the CPU lacks (flash-attention 2, the memory-efficient kernel) run as CPU
transcriptions with CUDA's contract (:mod:`tests.fake_cuda_kernels`); Triton kernels run in Triton's
interpreter (``TRITON_INTERPRET=1`` while the fake device is on).

``torch.cuda.is_available`` / ``device_count`` / ``mem_get_info`` / ``synchronize`` / ``empty_cache`` answer as a
machine with ``devices`` GPUs would while it is on. So a notebook that runs under it with ``device="cuda"`` has put
every tensor where it belongs; one that leaves a capture on the CPU and indexes it with a mask built from CUDA
input ids fails here as it would on the GPU. Test tooling, not shipped: a test gives papermill kernels the device through
:func:`tests.kernel_startup.kernel_env` (an IPython startup file that calls :func:`install_from_environment`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from tests.fake_cuda_kernels import KERNELS

ENV = "SINKLIB_FAKE_CUDA"  # "1" or "2": fake CUDA devices in the notebook kernels
_SYNC_LOAD = "HF_DEACTIVATE_ASYNC_LOAD"  # transformers: load weights in the calling thread
_TRITON_INTERPRET = "TRITON_INTERPRET"  # Triton: run kernels in its CPU interpreter
FAKE_MEMORY = 80 * 2 ** 30  # what mem_get_info reports per fake device (an 80 GB GPU)
_TENSOR_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.rand, torch.randn,
                     torch.randint, torch.tensor, torch.as_tensor, torch.linspace, torch.eye, torch.randperm,
                     torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like,
                     torch.randn_like}


# functions that may see tensors on two devices on real CUDA too (copies, metadata, module conversion)
_MIXING_ALLOWED = {"copy_", "set_", "__set__", "__get__", "_has_compatible_shallow_copy_type", "is_same_size",
                   "swap_tensors", "_is_view", "data_ptr", "untyped_storage", "__len__", "size", "dim", "numel",
                   "__repr__", "__format__", "_make_subclass", "is_floating_point", "is_complex", "element_size"}


class FakeCudaError(RuntimeError):
    """What real CUDA would have raised."""


def _index_of(device) -> int | None:
    """The CUDA index of a device argument (``"cuda"``, ``"cuda:1"``, ``torch.device``, an int), None for others."""
    if device is None:
        return None
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return (d.index or 0) if d.type == "cuda" else None


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor that says it lives on ``cuda:<index>`` (see the module docstring)."""

    _fake_index: int

    @staticmethod
    def wrap(t: torch.Tensor, index: int) -> FakeCudaTensor:
        """The same data and autograd history as ``t``, on fake device ``index``."""
        out = t.as_subclass(FakeCudaTensor)
        out._fake_index = index
        return out

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self._fake_index)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch._C.DisableTorchFunctionSubclass():
            data = self.as_subclass(torch.Tensor).detach().clone()
        out = FakeCudaTensor.wrap(data, self._fake_index).requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):  # a Parameter's data (torch's custom-tensor Parameter path)
            out._is_param = True
        memo[id(self)] = out
        return out

    def __repr__(self, *, tensor_contents=None) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            return f"FakeCuda(cuda:{self._fake_index}, {torch.Tensor.__repr__(self)})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _plain(t):
    if isinstance(t, FakeCudaTensor):
        with torch._C.DisableTorchFunctionSubclass():
            return t.as_subclass(torch.Tensor)
    return t


def _devices(args, kwargs) -> tuple[set[int], list[torch.Tensor]]:
    """The fake CUDA indices among the tensors, and the CPU tensors that are not 0-dim scalars."""
    flat, _ = tree_flatten((args, kwargs))
    cuda, cpu = set(), []
    for t in flat:
        if isinstance(t, FakeCudaTensor):
            cuda.add(t._fake_index)
        elif isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0:
            cpu.append(t)
    return cuda, cpu


def _is_cpu_array(t) -> bool:
    """A CPU tensor that is not a 0-dim scalar: what CUDA kernels refuse as an operand."""
    return (isinstance(t, torch.Tensor) and not isinstance(t, FakeCudaTensor) and t.device.type == "cpu"
            and t.dim() > 0)


def _advanced(index) -> bool:
    """Does this index go through index_put (a tensor other than a 0-dim integer, a list) rather than a view?"""
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if isinstance(part, list):
            return True
        if isinstance(part, torch.Tensor) and (part.dim() > 0 or part.dtype == torch.bool):
            return True
    return False


def _indexed_values(name: str, args, kwargs):
    """The values an indexed write puts through index_put -- ``x[advanced index] = values`` or ``index_put(_)``
    -- or None (a read, or a basic-index write, which is a copy into a view)."""
    if name == "__setitem__":
        return args[2] if len(args) > 2 and _advanced(args[1]) else None
    if name in ("index_put_", "index_put"):
        return args[2] if len(args) > 2 else kwargs.get("values")
    return None


def _cuda_only_kernel(func):
    """The CPU transcription of a CUDA-only attention kernel (:mod:`fake_cuda_kernels`) that ``func`` calls, or None."""
    packet = getattr(func, "overloadpacket", func)
    return KERNELS.get(getattr(packet, "__name__", ""))


def _is_device(a) -> bool:
    return isinstance(a, str | torch.device) or (isinstance(a, int) and not isinstance(a, bool))


def _target(func, args, kwargs):
    """For ``.to`` / ``.cuda`` / ``.cpu`` and factories: (moves?, the CUDA index or None for CPU)."""
    if func is torch.Tensor.cuda:
        dev = args[1] if len(args) > 1 else kwargs.get("device")
        return True, 0 if dev is None else _index_of(dev)
    if func is torch.Tensor.cpu:
        return True, None
    if func is torch.Tensor.to:
        dev = kwargs.get("device")
        for a in args[1:]:
            if _is_device(a):
                dev = a
            elif isinstance(a, torch.Tensor):
                dev = a.device
        if dev is None:
            return False, None
        return True, _index_of(dev)
    if func in _TENSOR_FACTORIES and "device" in kwargs:
        return True, _index_of(kwargs["device"])
    return False, None


def _rewrap(out, index: int):
    if isinstance(out, torch.Size):  # metadata (.shape, .size()): tree_map would make it a plain tuple
        return out
    return tree_map(lambda t: FakeCudaTensor.wrap(t, index) if isinstance(t, torch.Tensor)
                    and not isinstance(t, FakeCudaTensor) and t.device.type == "cpu" else t, out)


def _dispatch(func, args, kwargs):
    moves, index = _target(func, args, kwargs)
    if moves:
        if func in _TENSOR_FACTORIES:
            kwargs = {**kwargs, "device": "cpu"}
        elif func is torch.Tensor.to:
            args = tuple(("cpu" if _is_device(a) else _plain(a).cpu() if isinstance(a, torch.Tensor) else a)
                         if i > 0 else a for i, a in enumerate(args))
            kwargs = {k: ("cpu" if k == "device" else v) for k, v in kwargs.items()}
        elif func is torch.Tensor.cuda:
            func, args, kwargs = torch.Tensor.cpu, args[:1], {}
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*tree_map(_plain, args), **kwargs)
        if index is None:
            return tree_map(_plain, out)
        return tree_map(lambda t: FakeCudaTensor.wrap(_plain(t), index) if isinstance(t, torch.Tensor) else t, out)
    name = getattr(func, "__name__", "")
    if func is torch._has_compatible_shallow_copy_type:  # compares tensor types only, on any devices (Module.to)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*tree_map(_plain, args), **kwargs)
    if func is torch.Tensor.numpy:
        if isinstance(args[0], FakeCudaTensor):
            raise FakeCudaError(f"can't convert cuda:{args[0]._fake_index} device type tensor to numpy. Use "
                                f"Tensor.cpu() to copy the tensor to host memory first.")
    cuda, cpu = _devices(args, kwargs)
    kernel = _cuda_only_kernel(func)
    if kernel is not None and cuda:  # a kernel CUDA has and the CPU lacks: its transcription, CUDA's contract
        if len(cuda) > 1 or cpu:
            raise FakeCudaError(f"Expected all tensors to be on the same device ({name or func})")
        with torch._C.DisableTorchFunctionSubclass():
            out = kernel(*tree_map(_plain, args), **tree_map(_plain, kwargs))
        return _rewrap(out, next(iter(cuda)))
    if func is torch.histc and cuda and not args[0].is_floating_point():  # CUDA's histc takes integers, the CPU's not
        with torch._C.DisableTorchFunctionSubclass():
            out = torch.histc(_plain(args[0]).float(), *args[1:], **kwargs).to(args[0].dtype)
        return FakeCudaTensor.wrap(out, next(iter(cuda)))
    if name in ("__getitem__", "__setitem__", "index_put_", "index_put", "index_select", "masked_select"):
        base = args[0]
        if not isinstance(base, FakeCudaTensor):  # a CPU tensor indexed by CUDA, or CUDA values put through an index
            index_devices, _ = _devices(args[1:2], {k: v for k, v in kwargs.items() if k != "values"})
            if index_devices:
                raise FakeCudaError("indices should be either on cpu or on the same device as the indexed tensor "
                                    "(cpu)")
            values = _indexed_values(name, args, kwargs)
            if cuda and isinstance(values, FakeCudaTensor) and values.dim() > 0:
                raise FakeCudaError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                    f"cpu and cuda:{next(iter(cuda))}! ({name} of CUDA values through an index)")
            cuda = set()  # cpu[0] = cuda_value: a device-to-host copy into a view, which CUDA performs
        elif cuda and _is_cpu_array(_indexed_values(name, args, kwargs)):
            raise FakeCudaError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                f"cuda:{base._fake_index} and cpu! ({name} of CPU values through an index)")
        cpu = []  # a CUDA tensor takes CPU indices (and CPU values through basic indexing: a copy)
    if len(cuda) > 1:
        raise FakeCudaError(f"Expected all tensors to be on the same device, but found at least two devices, "
                            f"cuda:{min(cuda)} and cuda:{max(cuda)}!")
    if cuda and cpu and name not in _MIXING_ALLOWED:
        raise FakeCudaError(f"Expected all tensors to be on the same device, but found at least two devices, "
                            f"cuda:{next(iter(cuda))} and cpu! ({name or func})")
    with torch._C.DisableTorchFunctionSubclass():
        out = func(*args, **kwargs)
    if not cuda or func is torch.Tensor.__repr__:
        return out
    return _rewrap(out, next(iter(cuda)))


class _FakeCudaMode(TorchFunctionMode):
    """Catches what happens to plain (CPU) tensors: moves to CUDA and factories with ``device="cuda"``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        moves, index = _target(func, args, kwargs)
        if moves and index is not None:
            return _dispatch(func, args, kwargs)
        if any(issubclass(t, FakeCudaTensor) for t in types):
            return _dispatch(func, args, kwargs)
        return func(*args, **kwargs)


class _Stream:
    """The current stream of a fake device: never capturing a CUDA graph, nothing to wait for."""

    def is_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        return None


def triton_interpreter_index_fix() -> None:
    """Triton's interpreter before 3.7 turns a program-dependent scalar into a Python int with ``int(array)`` of a
    1-element array, which NumPy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars",
    triton-lang/triton#9171): every ``range(start, T, ...)`` in a kernel fails there. Where the installed interpreter
    has that line, wrap its tensor patching so ``__index__`` squeezes first, as the upstream fix does. A no-op on a
    fixed Triton or without Triton; idempotent."""
    try:
        import inspect

        from triton.runtime import interpreter
    except ImportError:
        return
    original = interpreter._patch_lang_tensor
    if getattr(original, "_sinklib_fixed", False) or "int(self.handle.data))" not in inspect.getsource(original):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched._sinklib_fixed = True
    interpreter._patch_lang_tensor = patched


@contextlib.contextmanager
def fake_cuda(devices: int = 1) -> Iterator[None]:
    """Pretend this machine has ``devices`` CUDA GPUs (see the module docstring); undone on exit, even on error."""
    if devices < 1:
        raise ValueError("devices must be >= 1")
    patches = {"is_available": lambda: True, "device_count": lambda: devices,
               "mem_get_info": lambda device=None: (FAKE_MEMORY, FAKE_MEMORY), "synchronize": lambda device=None: None,
               "empty_cache": lambda: None, "current_device": lambda: 0,
               "get_device_name": lambda device=None: "fake CUDA (tests.fake_cuda)",
               "memory_reserved": lambda device=None: 0, "memory_allocated": lambda device=None: 0,
               "is_bf16_supported": lambda *a, **k: True, "manual_seed_all": lambda seed: None,
               "manual_seed": lambda seed: None, "get_device_capability": lambda device=None: (9, 0),
               "get_device_properties": lambda device=None: _Properties(),
               "max_memory_allocated": lambda device=None: 0, "reset_peak_memory_stats": lambda device=None: None}
    saved = {k: getattr(torch.cuda, k) for k in patches}
    # optimizers ask the accelerator whether a CUDA graph is being captured (torch.optim's health check)
    accel = {"current_stream": lambda device=None: _Stream(), "current_device_index": lambda: 0}
    saved_accel = {k: getattr(torch.accelerator, k) for k in accel}
    for k, v in accel.items():
        setattr(torch.accelerator, k, v)
    # a torch-function mode holds in its own thread only: transformers' loader copies weights to the device in a
    # thread pool unless told not to, which would reach for the real driver
    saved_env = {k: os.environ.get(k) for k in (_SYNC_LOAD, _TRITON_INTERPRET)}
    os.environ[_SYNC_LOAD] = "1"
    os.environ[_TRITON_INTERPRET] = "1"  # Triton kernels on "cuda" tensors run in Triton's CPU interpreter
    triton_interpreter_index_fix()
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)  # module.to keeps the subclass
    for k, v in patches.items():
        setattr(torch.cuda, k, v)
    try:
        with _FakeCudaMode():
            yield
    finally:
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
        for k, v in saved_accel.items():
            setattr(torch.accelerator, k, v)
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Properties:
    """What ``torch.cuda.get_device_properties`` answers for a fake device (an H100's capability, 80 GB)."""

    name, major, minor, total_memory, multi_processor_count = "fake CUDA", 9, 0, FAKE_MEMORY, 132


_installed: contextlib.ExitStack | None = None


def install_from_environment() -> int:
    """In a notebook kernel: when ``SINKLIB_FAKE_CUDA`` is set to a number of devices, enter :func:`fake_cuda` for
    the rest of the kernel's life. Returns the number of fake devices (0: not installed)."""
    global _installed
    n = int(os.environ.get(ENV, "0") or 0)
    if n and _installed is None:
        _installed = contextlib.ExitStack()
        _installed.enter_context(fake_cuda(n))
    return n

