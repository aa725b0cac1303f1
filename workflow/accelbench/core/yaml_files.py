"""Reading a YAML file (config, system, site and campaign files) safely: through the bounded read of
:mod:`accelbench.core.plain_files`, with no tags that build objects, no key given twice in one mapping, no alias bomb
and no more nodes than such a file has (:func:`read_yaml`); :mod:`accelbench.core.files` offers these names too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelbench.core.plain_files import read_text
from accelbench.errors import ConfigError

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
