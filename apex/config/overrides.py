"""Config files and overrides: `load_config_file(path)` runs a Python file's
`get_config()`; `apply_override(config, "a.b", "text")` parses `text` as the
field's annotated type (`--config.a.b=value` on the command line);
`to_dict` gives the JSON form written to RUN_DIR/config.json.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import types
import typing
from typing import Any

from apex.config.schema import ApexConfig
from apex.errors import ConfigError


def _field_types(obj: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(type(obj))
    return {f.name: hints[f.name] for f in dataclasses.fields(obj)}


def _coerce(path: str, text: str, typ: Any) -> Any:
    """Parses `text` as a value of annotation `typ`, or raises ConfigError."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if text.strip().lower() in ("none", "null"):
            return None
        last: ConfigError | None = None
        for a in non_none:
            try:
                return _coerce(path, text, a)
            except ConfigError as err:
                last = err
        assert last is not None
        raise last
    if typ is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(path, text, "a boolean (true/false)")
    if typ is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(path, text, "an integer") from None
    if typ is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(path, text, "a number") from None
    if typ is str:
        return text
    if origin in (tuple, list):
        of_str = args[:1] == (str,)
        example = "a tuple literal such as " + ("('my_envs',)" if of_str else "(128, 128)")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            if of_str and text.strip():  # bare names: --config.env.imports=minatar,my_envs
                return tuple(s.strip() for s in text.split(",") if s.strip())
            raise ConfigError(path, text, example) from None
        if isinstance(value, (int, float)) or (of_str and isinstance(value, str)):
            value = (value,)
        if not isinstance(value, (tuple, list)):
            raise ConfigError(path, text, example)
        return _tuples(value)
    if origin is dict or typ is dict:
        value = _dict_literal(text)
        if not isinstance(value, dict):
            raise ConfigError(
                path, text, "a dict literal such as \"{'enable_wind': True}\" (or JSON)"
            )
        return value
    raise ConfigError(path, text, f"a value of type {typ}")


def _tuples(value: Any) -> Any:
    """Lists (from a literal or JSON) as tuples, nested ones too."""
    if isinstance(value, (tuple, list)):
        return tuple(_tuples(v) for v in value)
    return value


def _dict_literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    try:
        return json.loads(text)
    except ValueError:
        return None


def apply_override(config: Any, path: str, text: str) -> None:
    """Sets the field at dotted `path` (e.g. 'actor.num_actors') from its text form."""
    parts = path.split(".")
    node = config
    for i, name in enumerate(parts):
        types_ = _field_types(node)
        prefix = ".".join(parts[:i])
        if name not in types_:
            where = f"'{prefix}'" if prefix else "the config"
            raise ConfigError(
                path, text, f"an existing field; {where} has: {', '.join(sorted(types_))}"
            )
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(getattr(node, name)):
                raise ConfigError(
                    path,
                    text,
                    f"a leaf field; '{path}' is a section with: {', '.join(sorted(_field_types(getattr(node, name))))}",
                )
            setattr(node, name, _coerce(path, text, types_[name]))
        else:
            node = getattr(node, name)
            if not dataclasses.is_dataclass(node):
                raise ConfigError(
                    path, text, f"a path through sections; '{'.'.join(parts[: i + 1])}' is a value"
                )


def load_config_file(path: str) -> Any:
    """Imports `path` and returns its get_config()."""
    if not os.path.isfile(path):
        raise ConfigError(
            "--config", path, "the path of an existing config file such as configs/apex_cartpole.py"
        )
    if not path.endswith(".py"):
        raise ConfigError("--config", path, "a Python file (.py) that defines get_config()")
    spec = importlib.util.spec_from_file_location(f"_apex_config_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ConfigError("--config", path, "a Python file (.py) that defines get_config()")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: name it and its error
        raise ConfigError(
            "--config", path, f"a config file that imports ({type(err).__name__}: {err})"
        ) from None
    if not hasattr(module, "get_config"):
        raise ConfigError("--config", path, "a file that defines get_config()")
    try:
        config = module.get_config()
    except Exception as err:  # noqa: BLE001 - the user's function: name it and its error
        raise ConfigError(
            "--config", path, f"a file whose get_config() runs ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(config, ApexConfig):
        raise ConfigError(
            "--config",
            path,
            f"a file whose get_config() returns an apex.config.ApexConfig, not "
            f"{type(config).__name__}",
        )
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-able dicts."""
    return dataclasses.asdict(config)


def _fill(node: Any, data: dict[str, Any]) -> None:
    for field in dataclasses.fields(node):
        if field.name not in data:
            continue  # a field newer than the record: its default, what that run used
        value, current = data[field.name], getattr(node, field.name)
        if dataclasses.is_dataclass(current):
            if isinstance(value, dict):
                _fill(current, value)
        elif isinstance(value, dict):
            setattr(node, field.name, dict(value))
        else:
            setattr(node, field.name, _tuples(value))


def config_from_dict(data: dict[str, Any]) -> ApexConfig:
    """The ApexConfig of a dict written by `to_dict` (RUN_DIR/config.json, a
    checkpoint manifest, policy.json): JSON lists back to tuples, fields the
    record lacks (newer than it) at their defaults."""
    config = ApexConfig()
    _fill(config, data)
    return config
