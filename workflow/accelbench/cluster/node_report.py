"""What a batch job really sees: accelerators listed by the vendor tool and torch, and the scheduler's variables.

The GPU smoke rule (``gpu_smoke`` in ``workflow/rules/cluster.smk``) runs :func:`device_report` as a job so that a
site can check that its GPU request mapping (``gpu``/``gres`` resources in ``slurm/``) gives each job the devices the
system file expects.

Example::

    report = device_report(expected=1)   # {"host", "vendor_tool", "torch", "env", "expected", "seen", "matches"}
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

from accelbench import backends

# Scheduler and runtime variables that decide which devices a job gets (each backend's first).
JOB_ENV = (
    *(v for b in backends.all_backends() for v in b.job_env_vars),
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "GPU_DEVICE_ORDINAL",
)

# Vendor listing commands (each backend's `vendor_tool`): nvidia-smi prints one `GPU i: name (UUID: ...)` line per
# device; hl-smi one CSV line per card.
VENDOR_TOOLS = {b.vendor_tool[0]: list(b.vendor_tool) for b in backends.all_backends() if b.vendor_tool}


def vendor_listing(timeout_s: float = 60) -> dict:
    """Run each vendor tool found on PATH: ``{tool: {"returncode", "lines"}}`` (empty when none is installed)."""
    out = {}
    for tool, argv in VENDOR_TOOLS.items():
        if shutil.which(tool) is None:
            continue
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            out[tool] = {"returncode": proc.returncode, "lines": lines}
        except subprocess.TimeoutExpired:
            out[tool] = {"returncode": None, "lines": [f"timed out after {timeout_s} s"]}
    return out


def device_report(expected: int) -> dict:
    """Devices this process sees vs. ``expected`` (the job's accelerator request; 0 = a CPU job).

    ``seen`` counts the vendor tool's device lines where a tool ran, else torch's count (0 on CPU);
    ``matches`` is ``seen == expected``.
    """
    vendor = vendor_listing()
    found = backends.detect()
    listed = [len(v["lines"]) for v in vendor.values() if v["returncode"] == 0]
    seen = listed[0] if listed else (found["count"] if backends.get(found["backend"]).accelerator else 0)
    return {
        "host": socket.gethostname(),
        "vendor_tool": vendor,
        "torch": found,
        "env": {k: os.environ[k] for k in JOB_ENV if k in os.environ},
        "expected": int(expected),
        "seen": seen,
        "matches": seen == int(expected),
    }


def slurm_submission_hints(log_text: str) -> list[str]:
    """One line per rule whose Slurm submission was refused, naming the rule, Slurm's reason and the fix.

    ``log_text`` is Snakemake's run log (snakemake-executor-plugin-slurm reports ``Error in rule R: message: SLURM
    sbatch failed. The error message was '...'``). Returns an empty list when no submission failed.
    """
    hints, seen = [], set()
    for block in re.split(r"(?=Error in rule )", log_text):
        m = re.match(r"Error in rule (\w+):\s*\n\s*message: SLURM (?:sbatch|job submission) failed\W*(.*)", block)
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        reason = [ln.strip() for ln in m.group(2).splitlines() if "error" in ln.lower()]
        reason = reason[-1].rstrip("'.") if reason else m.group(2).splitlines()[0].strip()
        reason = re.sub(r"^(The error message was ')?(sbatch: error: )?", "", reason)
        hints.append(
            f"Slurm refused the job of rule {m.group(1)}: {reason}. Fix: edit slurm/site.yaml (partition, "
            f"gpu_partition, account, qos, node_limits or rules: {{{m.group(1)}: ...}}) or point "
            f"ACCELBENCH_SLURM_SITE at your site's copy; no output of this rule was written."
        )
    return hints


def honour_slurm_no_account(workflow) -> bool:
    """Make ``--slurm-no-account`` (slurm/site.yaml ``account: null``) submit without ``-A``.

    snakemake-executor-plugin-slurm 2.8.0 declares ``no_account`` but never reads it: without a ``slurm_account``
    resource it guesses an account from ``sacct`` and validates it with ``sacctmgr``/``sshare``, which fails on a
    cluster whose accounting answers ``sacct`` but not ``sacctmgr`` ("Unable to test the validity of the given or
    guessed SLURM account"). When the flag is set and the installed plugin's ``get_account_arg`` does not read it,
    jobs without a ``slurm_account`` resource are submitted with no account (Slurm then uses the user's default);
    an explicit ``slurm_account`` still goes through the plugin's own validation. A plugin version that reads the flag
    itself is left untouched.

    Returns:
        True when the plugin's account lookup was replaced for this run.
    """
    if not getattr(workflow.executor_settings, "no_account", False):
        return False
    import snakemake_executor_plugin_slurm as plugin

    original = plugin.Executor.get_account_arg
    if getattr(original, "_accelbench_no_account", False) or "no_account" in inspect.getsource(original):
        return False

    def get_account_arg(self, job):
        if job.resources.get("slurm_account"):
            yield from original(self, job)
        else:
            yield ""  # sbatch without -A

    get_account_arg._accelbench_no_account = True
    plugin.Executor.get_account_arg = get_account_arg
    return True


def failed_job_summaries(log_text: str, workdir: str | Path = ".") -> list[str]:
    """One line per failed job, naming its rule and the error its own log ends with.

    ``log_text`` is Snakemake's run log (``Error in rule R:`` blocks with ``log: PATH (check log file(s) ...)``, as
    printed for local and Slurm jobs alike); each rule log is read from ``workdir``. A job whose rule log names no
    error (a job killed by Slurm, a node failure) is reported with Snakemake's message (the Slurm job id and state).
    """
    lines = []
    for block in re.split(r"(?=Error in rule )", log_text):
        m = re.match(r"Error in rule (\w+):", block)
        if not m or re.search(r"message: SLURM (?:sbatch|job submission) failed", block):
            continue  # not run at all: slurm_submission_hints names those
        logs = re.search(r"^\s*log: (.+?) \(check log file", block, flags=re.M)
        message = re.search(r"^\s*message: (.+)$", block, flags=re.M)
        reason, where = None, ""
        for path in logs.group(1).split(", ") if logs else []:
            p = Path(workdir) / path
            text = p.read_text(errors="replace").splitlines() if p.is_file() else []
            errors = [ln.strip() for ln in text if re.search(r"\berror\b|Error:", ln)]
            if errors:
                reason, where = errors[-1], path
                break
        if reason is None:
            reason = message.group(1).strip() if message else "no error line in its log"
            where = logs.group(1) if logs else "no rule log"
        line = f"Job of rule {m.group(1)} failed: {reason} (log: {where})"
        if line not in lines:
            lines.append(line)
    return lines
