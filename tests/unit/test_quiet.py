"""Known-harmless library warnings are silenced at their source; others of the same library still show."""

import subprocess
import sys


def test_torchao_import_is_quiet_but_other_warnings_show():
    code = (
        "from accelbench.quiet import install; install()\n"
        "import logging, torchao\n"
        "logging.getLogger('torchao').warning('a real torchao warning')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "_C_mxfp8" not in out.stderr and "Detected no triton" not in out.stderr
    assert "is an Enum subclass" not in out.stderr
    assert "a real torchao warning" in out.stderr
