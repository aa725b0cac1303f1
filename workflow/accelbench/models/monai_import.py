"""MONAI without the start-up cost of networks this project does not use.

``import monai`` imports every MONAI sub-package (its ``__init__`` calls ``load_submodules``), and with them the
optional dependencies they find installed: TransChex imports Hugging Face ``transformers`` (BERT), which alone made
``import monai`` take 8.6 s instead of 4.0 s on 2 cores of an Intel Xeon (torch already imported; measured
2026-12-02). The Study A and SR3 jobs use MONAI's diffusion U-Net, its DDPM/DDIM schedulers and PSNR/SSIM, none of
which needs ``transformers``; :func:`import_monai` imports MONAI with ``transformers`` unimportable for that moment
only (MONAI's ``optional_import`` then records it as missing, which only TransChex and the MMAR loaders read), and
leaves ``transformers`` importable afterwards. Where ``transformers`` or MONAI is already imported it changes nothing.
"""

from __future__ import annotations

import sys

UNUSED = ("transformers",)  # optional dependencies of MONAI networks this project does not build


def import_monai():
    """``monai``, imported (once per process) without :data:`UNUSED`; returns the module."""
    if "monai" in sys.modules:
        return sys.modules["monai"]
    blocked = [name for name in UNUSED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # the import system's own "not importable" marker
    try:
        import monai
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    return monai
