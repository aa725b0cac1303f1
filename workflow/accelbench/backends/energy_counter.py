"""The energy-counter protocol between the backends and the energy meter (:mod:`accelbench.measure.energy`).

A backend whose devices have a cumulative energy counter returns one from
:meth:`accelbench.backends.base.Backend.energy_counter`: a :class:`Counter` subclass that lives in the backend's own
module (NVIDIA's NVML counter in :mod:`accelbench.backends.cuda`, Gaudi's HLML counter in
:mod:`accelbench.backends.hpu`, the host CPU's RAPL counter in :mod:`accelbench.backends.cpu`). The meter reads it
around windows of timed steps and knows no vendor. Nothing here imports a vendor library.
"""

from __future__ import annotations


class CounterUnavailable(Exception):
    """No energy counter can be read here; the message is the reason recorded as ``unsupported``."""


class Counter:
    """A cumulative energy counter of one device (or one host's CPU packages).

    Attributes:
        source: ``nvml`` | ``hlml`` | ``rapl`` (tests: ``scripted``).
        api: the call or file read.
        resolution_j: the counter's unit in J (NVML, HLML: 1e-3; RAPL: 1e-6).
        update_period_s: how often the vendor updates it (nominal; windows shorter than this are flagged).
        wrap_j: the value at which it wraps to 0 (RAPL's ``max_energy_range_uj``); None: it does not wrap in practice.
        identity: which physical counter this is (NVML UUID, Gaudi module, RAPL zones): ranks sharing one are
            counted once.
        covers: what the counter includes.
    """

    source = "none"
    api = ""
    resolution_j = 1e-3
    update_period_s: float | None = None
    wrap_j: float | None = None
    identity = ""
    covers = "device board"

    def read_j(self) -> float:
        """The counter now, in J."""
        raise NotImplementedError

    def describe(self) -> dict:
        """The counter's fields as a result records them (``source``, ``api``, ``resolution_j``,
        ``update_period_s``, ``wrap_j``, ``counter`` (the identity), ``covers``)."""
        return {
            "source": self.source,
            "api": self.api,
            "resolution_j": self.resolution_j,
            "update_period_s": self.update_period_s,
            "wrap_j": self.wrap_j,
            "counter": self.identity,
            "covers": self.covers,
        }
