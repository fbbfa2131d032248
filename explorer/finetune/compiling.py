"""What the worker process compiles: JAX's persistent compilation cache switched on (compiled steps kept on
disk for the next worker), and a count of compilations and cache hits per job."""

from __future__ import annotations

from pathlib import Path

import keras


def use_compile_cache(folder: str | None, max_mb: float, portable: bool = False) -> str | None:
    """Switches on JAX's persistent compilation cache in `folder` (every compiled step kept on disk, so the
    same step in a later process loads instead of compiling), bounded to `max_mb` by JAX's own LRU eviction.
    `portable`: entries that still load once the folder is moved to another path or machine; JAX's XLA
    autotuning cache is then off (by default it lives in a folder inside `folder`, and that path is part of
    every entry's key). Returns the folder, or None when this is not JAX or no folder is given."""
    if not folder or keras.backend.backend() != "jax":
        return None
    import jax
    Path(folder).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", int(max_mb * 2**20))
    if portable:
        jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    return str(folder)


class CompileCounter:
    """What the process compiled: on JAX, every XLA compilation (JAX's own monitoring events: a compile
    request the persistent cache answered is counted as a cache hit, not a compilation); elsewhere nothing
    is counted (None)."""

    def __init__(self):
        self.compiles = self.cache_hits = None
        if keras.backend.backend() == "jax":
            from jax import monitoring
            self.compiles = self.cache_hits = 0
            monitoring.register_event_duration_secs_listener(self._duration)
            monitoring.register_event_listener(self._event)

    def _duration(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.compiles += 1

    def _event(self, event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    def counts(self) -> tuple:
        """(compilations, cache hits) so far."""
        if self.compiles is None:
            return None, None
        return self.compiles - self.cache_hits, self.cache_hits

