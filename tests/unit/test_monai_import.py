"""accelbench.models.monai_import: MONAI imported without Hugging Face transformers (its TransChex network's
optional import), which the Study A and SR3 jobs never use, and transformers still importable afterwards."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from accelbench.models.monai_import import import_monai
import_monai()
from monai.networks.nets import DiffusionModelUNet
from monai.networks.schedulers import DDIMScheduler, DDPMScheduler
from monai.metrics import PSNRMetric, SSIMMetric
print("transformers after monai:", "transformers" in sys.modules)
import transformers
print("importable:", bool(transformers.__version__))
"""


def test_monai_is_imported_without_transformers_which_stays_importable():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "transformers after monai: False" in proc.stdout, proc.stdout
    assert "importable: True" in proc.stdout, proc.stdout


def test_an_already_imported_monai_or_transformers_is_left_as_it_is(monkeypatch):
    from accelbench.models import monai_import

    sentinel = object()
    monkeypatch.setitem(sys.modules, "monai", sentinel)
    assert monai_import.import_monai() is sentinel
