"""Text corpus for Study B's embedded default: the Python documentation shipped with CPython.

``pydoc_data.topics.topics`` maps ~80 help topics (``assert``, ``class``, ``for``, ...) to their
reference-manual text (~450 k characters): real English technical prose, offline, identical on every
CPython 3.11 install. Splits are deterministic (by sorted topic name), so calibration, validation
and test text never overlap.
"""

from __future__ import annotations

import hashlib


def pydoc_topics() -> dict[str, str]:
    """``{topic: text}`` from CPython's ``pydoc_data.topics`` (sorted by topic)."""
    from pydoc_data.topics import topics

    return {k: topics[k] for k in sorted(topics)}


def split_topics(topics: dict[str, str], fractions: dict[str, float]) -> dict[str, dict[str, str]]:
    """Deterministic split of topics into named parts by a hash of the topic name.

    Args:
        topics: ``{topic: text}``.
        fractions: e.g. ``{"calibration": 0.2, "validation": 0.4, "test": 0.4}`` (must sum to 1).

    Returns:
        ``{part: {topic: text}}``; every topic lands in exactly one part.
    """
    if abs(sum(fractions.values()) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must sum to 1, got {fractions}")
    bounds, acc = [], 0.0
    for name, frac in fractions.items():
        acc += frac
        bounds.append((acc, name))
    parts: dict[str, dict[str, str]] = {name: {} for name in fractions}
    for topic, text in topics.items():
        u = int(hashlib.sha256(topic.encode()).hexdigest()[:8], 16) / 2**32
        name = next(n for b, n in bounds if u < b or b == bounds[-1][0])
        parts[name][topic] = text
    return parts


def corpus_fingerprint(text: str) -> str:
    """Short SHA-256 of a text, recorded in results so that a different corpus is visible."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
