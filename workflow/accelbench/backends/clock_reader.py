"""The clock-reader protocol between the backends and the clock record of a timed phase
(:mod:`accelbench.measure.clocks`).

A backend whose devices report their clocks returns a :class:`ClockReader` from
:meth:`accelbench.backends.base.Backend.clock_reader`; the reader lives in the backend's own module (NVIDIA's NVML
reader in :mod:`accelbench.backends.cuda`). The clock record reads it between timed steps, without synchronizing
the device, and knows no vendor. Nothing here imports a vendor library.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClockSample:
    """The device's clocks at one moment: ``sm_clock_mhz`` (the SM clock now, MHz), ``sm_clock_max_mhz`` (its
    maximum, MHz; None where not reported), ``temperature_c`` (the GPU die, degrees C; None where not reported) and
    ``reasons`` (the names of the clock-event reasons active now, e.g. ``sw_power_cap``, ``gpu_idle``; a bit the
    reader cannot name as ``0x...``)."""

    sm_clock_mhz: float
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    reasons: tuple[str, ...] = field(default_factory=tuple)


class ClockReader:
    """The clocks of one device. Never raises: :meth:`read` gives None where the device cannot be read now, with
    :attr:`reason` saying why (the reason an ``unsupported`` clock record gives).

    Attributes:
        source: ``nvml`` (tests: ``scripted``).
        api: the calls read.
        identity: which device (NVML UUID).
        reason: why the last read failed (None: it did not).
    """

    source = "none"
    api = ""
    identity = ""
    reason: str | None = None

    def read(self) -> ClockSample | None:
        """The clocks now; None (and :attr:`reason` set) where they cannot be read."""
        raise NotImplementedError

    def describe(self) -> dict:
        """The reader's fields as a record gives them (``source``, ``api``, ``device``)."""
        return {"source": self.source, "api": self.api, "device": self.identity}
