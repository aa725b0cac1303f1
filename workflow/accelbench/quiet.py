"""Silence library warnings that are known to be harmless here, at their source, and keep every other one.

Each entry names the logger, a pattern of the message and why it is harmless. They are dropped by a
:class:`logging.Filter` on that logger only, so a new or different warning of the same library still shows.
"""

from __future__ import annotations

import logging
import re

# (logger, message pattern, why harmless)
KNOWN_HARMLESS: list[tuple[str, str, str]] = [
    (
        "torchao",
        r"^Failed to load .*/torchao/_C_\w+.*\.so",
        "torchao probes optional compiled kernels (MXFP8, CUTLASS sm90a) built for other CUDA/Python versions; "
        "none is used here, and a method that needs one records its own 'unsupported' reason",
    ),
    (
        "torchao.kernel.intmm",
        r"Detected no triton",
        "CPU-only torch has no Triton; torchao then uses its non-Triton int8 matmul",
    ),
    (
        "torch.utils._pytree",
        r"is an Enum subclass and is now natively supported by torch.compile",
        "torchao registers an Enum with a torch API that newer torch deprecates; no effect on results",
    ),
]


class _Drop(logging.Filter):
    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def install() -> None:
    """Attach the filters (idempotent); call before the libraries are imported."""
    for name, pattern, _ in KNOWN_HARMLESS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) and f.pattern.pattern == pattern for f in logger.filters):
            logger.addFilter(_Drop(pattern))
