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

The module is split by what each part does, every name still offered here: the bounded read of one plain file
(:func:`read_bytes`, :func:`open_binary`, :func:`read_text`, :func:`sha256`) is :mod:`accelbench.core.plain_files`,
YAML (:func:`read_yaml`) :mod:`accelbench.core.yaml_files`, the folders of the operating system (:func:`os_folder`)
:mod:`accelbench.core.os_folders`; this module reads NumPy, JSON and CSV on top of them.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

# the bounded read itself, YAML and the folders of the operating system, offered here as they always were
from accelbench.core.os_folders import SYSTEM_DIRS, USER_DIRS_IN_SYSTEM_DIRS, os_folder  # noqa: F401
from accelbench.core.plain_files import (  # noqa: F401
    MAX_BYTES,
    MAX_TEXT_BYTES,
    open_binary,
    read_bytes,
    read_text,
    refuse,
    sha256,
)
from accelbench.core.yaml_files import (  # noqa: F401
    MAX_EXPANDED_VALUES,
    MAX_YAML_NODES,
    expansion_errors,
    read_yaml,
    yaml_node_count,
)
from accelbench.errors import AccelbenchError


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
            raise refuse(error, what, path, f"{why}; move it away") from None
        except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            raise refuse(error, what, path, f"not a readable NumPy file ({exc or type(exc).__name__})") from None


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
        raise refuse(
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
        raise refuse(error, what, Path(path), f"not valid JSON ({exc})") from None
    except RecursionError:
        raise refuse(error, what, Path(path), "nested too deeply; move it away") from None


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
        raise refuse(error, what, Path(path), f"line {reader.line_num}: not CSV ({exc})") from None
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
        raise refuse(error, what, Path(path), f"not a CSV table ({why})") from None
