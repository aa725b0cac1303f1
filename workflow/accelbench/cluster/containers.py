"""Per-architecture images (``containers/<image>/``) at run time: the URI a system runs in, the apptainer settings
of its image, and the container command Snakemake needs (``workflow/rules/common.smk`` uses these).

Each system file names its image (``image: cuda`` or ``image: habana``); ``containers/<image>/`` holds a Dockerfile
and an Apptainer definition (``accelbench-<image>.def``). Checking the recipes against ``containers/versions.yaml``
and ``pyproject.toml`` (what CI runs) is :mod:`accelbench.cluster.recipes`.

Example::

    uri = image_uri(system, "docker://ghcr.io/accelbench/accelbench-{image}:0.1.0", "containers")
    env = apptainer_environment(system, ".")   # {"APPTAINER_NV": "1", ...} for the cuda image
"""

from __future__ import annotations

import os
import shutil
import socket
import string
import sys
from pathlib import Path

from accelbench import backends
from accelbench.errors import ConfigError


def image_uri(system, uri_template: str, containers_dir: str | Path) -> str:
    """The image a system's rules run in: ``uri_template`` with ``{image}`` = ``system.image``.

    Raises:
        ConfigError: ``containers/<image>/`` has no Dockerfile or Apptainer definition (the message names the
            system, the missing files and the images that exist).
    """
    folder = Path(containers_dir) / system.image
    missing = [p.name for p in (folder / "Dockerfile", folder / f"accelbench-{system.image}.def") if not p.is_file()]
    if missing:
        have = sorted(p.parent.name for p in Path(containers_dir).glob("*/Dockerfile"))
        raise ConfigError(
            f"system {system.name!r} names image {system.image!r}, but {folder} lacks {', '.join(missing)}: every rule "
            f"runs in that image. Fix: set `image:` in the system file to one of {have}, or add "
            f"{folder}/Dockerfile and {folder}/accelbench-{system.image}.def (see containers/README.md)"
        )
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(uri_template) if f is not None]
    except ValueError as exc:  # a lone brace
        raise ConfigError(f"container_uri {uri_template!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
    other = [field for field, _, _ in fields if field != "image"]
    if other:
        raise ConfigError(
            f"container_uri {uri_template!r} has the placeholder {{{other[0]}}}: only {{image}} is filled in"
        )
    dressed = [f"{{image{'!' + conv if conv else ''}{':' + spec if spec else ''}}}" for _, spec, conv in fields]
    dressed = [d for d in dressed if d != "{image}"]
    if dressed:  # checked before formatting: {image:>1500000000} would build a 1.5 GB string first
        raise ConfigError(
            f"container_uri {uri_template[:200]!r}: {dressed[0][:60]} has a format spec or conversion; write plain "
            "{image} (the image name is filled in as it is)"
        )
    if "{image}" not in uri_template:
        raise ConfigError(f"container_uri {uri_template!r} must contain '{{image}}' (the system's image name)")
    return uri_template.format(image=system.image)


def apptainer_environment(system, workdir: str | Path) -> dict[str, str]:
    """Environment variables that give ``apptainer exec`` the flags of the system's image.

    CUDA: ``--nv``. Habana: ``--bind /dev/accel`` (added to any APPTAINER_BIND already set),
    ``HABANA_VISIBLE_DEVICES`` (the job's value, ``all`` if unset) and ``HABANA_LOGS=<workdir>/logs/habana``
    (created here) passed into the container.

    The flags are those of the backend the image is built for (:meth:`accelbench.backends.Backend.apptainer_env`,
    found by its ``container_image``), so they reach every job of a run without a site-specific --apptainer-args;
    a system running another backend's image (cpu in the cuda image) gets that image's flags, as before.
    """
    owner = backends.for_image(system.image)
    return owner.apptainer_env(workdir, os.environ) if owner is not None else {}


def require_apptainer(uri: str, rules: str = "every rule") -> str:
    """The container command Snakemake 9 will run on this host: ``singularity`` on PATH.

    Snakemake (``snakemake.deployment.singularity``) calls only ``singularity`` (``singularity --version``,
    ``singularity exec``); Apptainer installs ``singularity`` as a link to itself, but a site module or a hand-built
    apptainer may put ``apptainer`` alone on PATH, which Snakemake cannot use.

    Raises:
        ConfigError: no ``singularity`` on PATH; the message names the host, the rules and image, and ends with one
            line to fix it (link apptainer as ``singularity`` when only ``apptainer`` was found).
    """
    binary = shutil.which("singularity")
    if binary is not None:
        return binary
    apptainer = shutil.which("apptainer")
    if apptainer:
        found = f"only `apptainer` ({apptainer}) is on PATH, but Snakemake runs `singularity`"
        fix = (
            f"mkdir -p ~/bin && ln -s {apptainer} ~/bin/singularity && export PATH=~/bin:$PATH "
            f"(or `deployment: none` in slurm/site.yaml)"
        )
    else:
        found = "neither `singularity` nor `apptainer` is on PATH"
        fix = (
            "install apptainer or `module load apptainer` (it provides `singularity`) on this host and the compute "
            "nodes, or drop --software-deployment-method apptainer (slurm/site.yaml: `deployment: none`)"
        )
    raise ConfigError(
        f"--software-deployment-method apptainer was given, but on host {socket.gethostname()} {found};\n"
        f"{rules} runs in {uri}.\nFix: {fix}"  # one line each: the terminal keeps lines to 200 characters
    )


class ApptainerWhenRun(set):
    """The workflow's deployment methods (``workflow.deployment_settings.deployment_method``), asked by Snakemake
    once it knows whether this is a dry run: a real run checks the container command (:func:`require_apptainer`:
    one line with the fix); a dry run on a host without it plans without containers, saying so once (a login node
    without Apptainer plans any system; only a real run needs it). While the workflow is still parsed (no executor
    yet) apptainer counts as asked for."""

    def __init__(self, methods, workflow, uri: str):
        super().__init__(methods)
        self.workflow, self.uri, self.noted = workflow, uri, False

    def __contains__(self, method) -> bool:
        from snakemake_interface_executor_plugins.settings import DeploymentMethod

        if method is not DeploymentMethod.APPTAINER or not set.__contains__(self, method):
            return set.__contains__(self, method)
        from accelbench.core.snakemake_hooks import executor_known

        if not executor_known(self.workflow):  # still parsing the workflow
            return True
        if self.workflow.dryrun and not shutil.which("singularity"):
            if not self.noted:
                self.noted = True
                print(
                    "accelbench: dry run on a host without `singularity`/`apptainer`: planned without containers; "
                    "a real run with --software-deployment-method apptainer needs it",
                    file=sys.stderr,
                )
            return False
        if not self.workflow.dryrun:
            require_apptainer(self.uri, "every rule of this workflow (e.g. unet3d_profile)")
        return True
