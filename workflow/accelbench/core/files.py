"""The one bounded read of a file a user can reach: result files (this machine's, copied in, the reference runs'),
``--spec`` and ``--results-file`` files, configs, system, campaign and ``run.yaml`` files, redo journals.

:func:`read_bytes` reads a plain file only (a link to one is followed): never a FIFO (which would block even a dry
run), a device such as ``/dev/zero`` (which never ends), a socket or a folder; and at most ``limit`` bytes (a file
that grows past it while read is refused too). Every refusal is one line naming the file
(:class:`~accelbench.errors.AccelbenchError` or the caller's subclass), with ``.why`` (the same without the file)
and ``.missing`` (True when the file does not exist).

The same checks open NumPy files (:func:`open_binary`, :func:`load_numpy`), CSV tables (:func:`read_csv`; as a
DataFrame: :func:`read_frame`) and JSON
(:func:`read_json`); a JSON or YAML document is also bounded in values, not only bytes (:func:`check_nodes`), since
``[[],[],...]`` takes about 25 times its size once parsed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from accelbench.errors import AccelbenchError, ConfigError

MAX_BYTES = 256 * 2**20  # a result with its kernel tables is a few MB; a bigger file of these kinds is not one
MAX_TEXT_BYTES = 16 * 2**20  # configs, spec and list files, run.yaml, journals: kilobytes


def _refuse(error: type[AccelbenchError], what: str, path: Path, why: str, missing: bool = False) -> AccelbenchError:
    err = error(f"{what} not found: {path}" if missing else f"{what} {path}: {why}")
    err.why, err.missing = why, missing
    return err


def _kind(mode: int) -> str:
    """What a file that is not a plain one is, for the message (``a FIFO``, ``a character device``)."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file of a known kind"


def _open_regular(path: Path, what: str, limit: int, error: type[AccelbenchError], follow: bool) -> int:
    """An open descriptor of plain file ``path`` of at most ``limit`` bytes (see :func:`read_bytes`)."""
    try:
        st = os.stat(path, follow_symlinks=follow)  # before opening: a device or FIFO is never opened
    except FileNotFoundError:
        raise _refuse(error, what, path, "not found", missing=True) from None
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(error, what, path, "a link; such a file is never followed out of its folder (copy the file in)")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(error, what, path, f"not a plain file ({_kind(st.st_mode)}); move it away")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: replaced by a FIFO since, the open does not wait for a writer
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(error, what, path, f"not a plain file ({_kind(st.st_mode)}); move it away")
        if st.st_size > limit:
            raise _refuse(error, what, path, f"{st.st_size} bytes, more than such a file has ({limit}); move it away")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> bytes:
    """The bytes of ``path``, read safely (see the module docstring).

    Args:
        path: the file (a link to a plain file is followed unless ``follow`` is False).
        what: what the file is, for the message (``"--spec file"``, ``"result file"``).
        limit: the most bytes it may have.
        error: the exception class raised.
        follow: False: a link is refused (files of a results tree copied in from elsewhere).

    Raises:
        AccelbenchError: (``error``) missing, not a plain file, bigger than ``limit``, or unreadable; one line.
    """
    path = Path(path)
    fd = _open_regular(path, what, limit, error, follow)
    try:
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _refuse(error, what, path, f"grew past {limit} bytes while read; move it away")
        return b"".join(chunks)
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_binary(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> Iterator[BinaryIO]:
    """``path`` opened for reading as a binary file object, checked as :func:`read_bytes` checks it (a plain file of
    at most ``limit`` bytes, opened without blocking): for readers that take a file object (``np.load``, images).
    The size is checked at the open; a reader that reads past it sees the file's end."""
    path = Path(path)
    fd = _open_regular(path, what, limit, error, follow)
    os.set_blocking(fd, True)  # a plain file: reads never wait
    with os.fdopen(fd, "rb") as fh:
        yield fh


def load_numpy(
    path: str | Path,
    what: str = "NumPy file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> dict[str, Any] | Any:
    """A ``.npy`` array or every array of a ``.npz`` archive (``{name: array}``), read through :func:`open_binary`
    with ``allow_pickle=False`` (a file holding Python objects is refused, never unpickled).

    Raises:
        AccelbenchError: (``error``) as :func:`read_bytes`, or not a NumPy file (one line naming the file).
    """
    import numpy as np

    path = Path(path)
    with open_binary(path, what, limit, error, follow) as fh:
        try:
            loaded = np.load(fh, allow_pickle=False)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    return {k: loaded[k] for k in loaded.files}
            return loaded
        except ValueError as exc:
            why = (
                "holds Python objects (pickled), not plain arrays"
                if "pickle" in str(exc)
                else f"not NumPy data ({exc})"
            )
            raise _refuse(error, what, path, f"{why}; move it away") from None
        except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            raise _refuse(error, what, path, f"not a readable NumPy file ({exc or type(exc).__name__})") from None


MAX_JSON_NODES = 4_000_000  # values of a JSON/YAML document (a reference result: ~4,500 in 130 kB); ~0.4 GB parsed


def node_count(text: str | bytes) -> int:
    """An upper bound on the values of a JSON (or flow-style YAML) document, from its text in linear time without
    parsing: each ``[``, ``{`` and ``,`` starts at most one value (those inside strings are counted too, so the
    bound errs on the safe side). Parsed, each value takes about 60-100 bytes."""
    if isinstance(text, str):
        return text.count("[") + text.count("{") + text.count(",") + 1
    return text.count(b"[") + text.count(b"{") + text.count(b",") + 1


def check_nodes(
    text: str | bytes,
    path: str | Path,
    what: str = "file",
    error: type[AccelbenchError] = AccelbenchError,
    limit: int = MAX_JSON_NODES,
) -> None:
    """Refuse a document of more than ``limit`` values (:func:`node_count`) before it is parsed: the byte cap alone
    lets ``[[],[],...]`` take 25 times its size in memory.

    Raises:
        AccelbenchError: (``error``) one line naming the file and the bound.
    """
    n = node_count(text)
    if n > limit:
        raise _refuse(
            error, what, Path(path), f"holds up to {n:,} values, more than such a file has ({limit:,}); move it away"
        )


def read_json(
    path: str | Path,
    what: str = "JSON file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> Any:
    """The JSON value of ``path``: :func:`read_bytes`, at most :data:`MAX_JSON_NODES` values (:func:`check_nodes`),
    UTF-8, nested no deeper than Python's parser allows.

    Raises:
        AccelbenchError: (``error``) as :func:`read_bytes`, too many values, not UTF-8 JSON, nested too deeply; one
            line naming the file.
    """
    data = read_bytes(path, what, limit, error, follow)
    check_nodes(data, path, what, error)
    try:
        return json.loads(data.decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _refuse(error, what, Path(path), f"not valid JSON ({exc})") from None
    except RecursionError:
        raise _refuse(error, what, Path(path), "nested too deeply; move it away") from None


MAX_CSV_FIELD = 1 * 2**20  # one cell of a table (a kernel's demangled name: hundreds of characters)


def read_csv(
    path: str | Path,
    what: str = "CSV file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
    field_limit: int = MAX_CSV_FIELD,
) -> list[dict[str, str]]:
    """The rows of CSV file ``path`` with a header line (``csv.DictReader``), read through :func:`read_text` (a plain
    file of at most ``limit`` bytes); every cell at most ``field_limit`` characters.

    Raises:
        AccelbenchError: (``error``) as :func:`read_bytes`, not UTF-8, a cell past ``field_limit`` or bad CSV; one
            line naming the file (and the line).
    """
    import csv
    import io

    text = read_text(path, what, limit, error, follow)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    old = csv.field_size_limit(field_limit)
    try:
        return list(reader)
    except csv.Error as exc:
        raise _refuse(error, what, Path(path), f"line {reader.line_num}: not CSV ({exc})") from None
    finally:
        csv.field_size_limit(old)


def read_frame(
    path: str | Path,
    what: str = "CSV file",
    limit: int = MAX_TEXT_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    **read_csv_kwargs: Any,
):
    """A ``pandas.DataFrame`` of CSV file ``path`` (``pandas.read_csv(..., **read_csv_kwargs)``, e.g.
    ``comment="#"``) read through :func:`read_text`: a plain UTF-8 file of at most ``limit`` bytes (reference tables
    under ``resources/reference/`` and claims tables are kilobytes), so a FIFO, device or huge file there is one
    line naming it, never a blocked or unbounded read.

    Raises:
        AccelbenchError: (``error``) as :func:`read_text`, or not CSV (pandas' reason); one line naming the file.
    """
    import io

    import pandas as pd

    text = read_text(path, what, limit, error)
    try:
        return pd.read_csv(io.StringIO(text), **read_csv_kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _refuse(error, what, Path(path), f"not a CSV table ({why})") from None


def read_text(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_TEXT_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> str:
    """:func:`read_bytes` as UTF-8 text (a file that is not UTF-8: one line naming it)."""
    data = read_bytes(path, what, limit, error, follow)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise _refuse(error, what, Path(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def sha256(
    path: str | Path, what: str = "file", limit: int = MAX_BYTES, error: type[AccelbenchError] = AccelbenchError
) -> str:
    """The sha256 of :func:`read_bytes` (hex)."""
    return hashlib.sha256(read_bytes(path, what, limit, error)).hexdigest()


# --------------------------------------------------------------------------- YAML (configs, system and site files)
MAX_EXPANDED_VALUES = 1_000_000  # values of a config with every YAML alias expanded (config/config.yaml: ~1,000)


def _strict_loader():
    """PyYAML's safe loader refusing a key given twice in one mapping (the last would win silently)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise ConfigError(
                        f"{node.start_mark.name}: line {key_node.start_mark.line + 1}: key {key!r} is given "
                        f"twice in one mapping (first on line {seen[key]}); keep one"
                    )
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


MAX_YAML_NODES = 200_000  # nodes before parsing (yaml_node_count; biggest file here ~1,000; 160k: 3.7 s, 176 MB)


def yaml_node_count(text: str) -> int:
    """An upper bound on the nodes of a YAML document, from its text in linear time: every node of block style
    starts a line or follows ``- `` or ``: ``, every node of flow style follows ``[``, ``{`` or ``,`` (characters
    inside strings and comments are counted too: the bound errs on the safe side)."""
    return sum(text.count(c) for c in "[{,\n-:") + 1


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """A YAML file (config, system) read safely: no tags that build objects, no key given twice in one mapping, no
    alias bomb (at most :data:`MAX_EXPANDED_VALUES` values with every alias expanded), no nesting past Python's
    limit, no more than :data:`MAX_YAML_NODES` values (:func:`yaml_node_count`, before parsing). ``what``: what the
    file is, for the messages (``"Slurm site file"``).

    Raises:
        ConfigError: too many values (file and bound named), missing, not a plain file of at most
            :data:`MAX_TEXT_BYTES`
            (:func:`read_text`), not YAML, a duplicate key (file and line), or an alias bomb /
            too deep (file named).
    """
    import io

    import yaml

    path = Path(path)
    text = read_text(path, what, error=ConfigError)  # a plain file of bounded size (FIFO, /dev/zero refused)
    nodes = yaml_node_count(text)
    if nodes > MAX_YAML_NODES:  # before parsing: PyYAML keeps ~1 kB per node while it builds the document
        raise ConfigError(
            f"{what} {path}: holds up to {nodes:,} values, more than such a file has ({MAX_YAML_NODES:,}); move it away"
        )
    stream = io.StringIO(text)
    stream.name = str(path)  # the loader's marks name the file
    try:
        data = yaml.load(stream, Loader=_strict_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    problems = expansion_errors(data, str(path))
    if problems:
        raise ConfigError(problems[0])
    return data


def expansion_errors(data: Any, what: str = "config") -> list[str]:
    """One line when ``data`` (a parsed YAML document, aliases shared) would have more than
    :data:`MAX_EXPANDED_VALUES` values once written out (as spec files are): a YAML alias bomb."""
    memo: dict[int, int] = {}

    def size(obj) -> int:
        if id(obj) in memo:
            return memo[id(obj)]
        children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        n = 1
        for child in children:
            n += size(child)
            if n > MAX_EXPANDED_VALUES:
                break
        memo[id(obj)] = n
        return n

    try:
        n = size(data)
    except RecursionError:
        return [f"{what}: nested too deeply"]
    if n > MAX_EXPANDED_VALUES:
        return [
            f"{what}: more than {MAX_EXPANDED_VALUES:,} values once its YAML aliases (*name) are expanded "
            f"(an alias bomb?); write the values out or use fewer aliases"
        ]
    return []


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
