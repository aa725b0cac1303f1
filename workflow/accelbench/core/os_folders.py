"""The folders of the operating system that results are never written into (as root they could be):
:func:`os_folder` judges a results folder after following its links; :mod:`accelbench.core.files` offers these names
too.
"""

from __future__ import annotations

import os
from pathlib import Path

# Folders of the operating system that results are never written into (as root they could be): a result folder may
# not be `/`, one of these or lie below one, after following links ...
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
# ... except these folders of users' own files: temporary files kept across reboots, homes under /var (Fedora
# Atomic: /home -> /var/home), source trees (a container's usual WORKDIR /usr/src/app)
USER_DIRS_IN_SYSTEM_DIRS = ("/var/tmp", "/var/home", "/usr/src", "/usr/local/src")


def os_folder(path: str | Path) -> str | None:
    """``path`` with every link followed (relative to the working directory) when that is ``/`` or lies in a folder
    of :data:`SYSTEM_DIRS` outside :data:`USER_DIRS_IN_SYSTEM_DIRS`; None for a folder of one's own."""
    resolved = os.path.realpath(path)

    def under(folder: str) -> bool:
        return resolved == folder or resolved.startswith(folder + "/")

    if resolved == "/" or (any(map(under, SYSTEM_DIRS)) and not any(map(under, USER_DIRS_IN_SYSTEM_DIRS))):
        return resolved
    return None
