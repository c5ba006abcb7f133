"""YAML file or shipped config name + `--set key=value` overrides -> a validated Config; save and help.

Precedence: defaults < algorithm preset < file < --set, where a preset counts at the level that names it:
one named in the file sits under the file's keys, one named by `--set algorithm.preset=X` over them (the
file's algorithm becomes X, as in `rlvr compare`), and other --set keys win over both. Every value is typed
by its field; an unknown key names the closest valid one.
"""

from __future__ import annotations

import copy
import os
import types
import typing
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from rlvr.config.checks import validate
from rlvr.config.fields import bound_text, key_meant
from rlvr.config.sections import Config, ConfigError
from rlvr.config.sources import EMBEDDED_MODELS
from rlvr.presets import deep_merge, get_preset, nested


SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # package data: demo, sort, recipes, compare


# the folders of the shipped configs and the command that runs each kind
SHIPPED_KINDS = {"": "train", "environments": "train", "recipes": "recipe", "compare": "compare"}


def shipped_configs() -> list[tuple[str, str, str]]:
    """(command, name, its header comment's first paragraph) of every shipped config: what `rlvr configs` lists; the
    name is what CONFIG takes (`rlvr train sort`, `rlvr recipe r1`, `rlvr compare compare/length_bias`)."""
    found = []
    for folder, command in SHIPPED_KINDS.items():
        for path in sorted((SHIPPED_CONFIGS / folder).glob("*.yaml")):
            name = path.stem if folder in ("", "recipes") else f"{folder}/{path.stem}"  # as config_file finds it
            found.append((command, name, _summary(path.read_text(encoding="utf-8"))))
    return found


def _summary(text: str) -> str:
    """The first paragraph of a YAML file's header comment (up to a list, a blank line or the first key)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith(("#  ", "#\t")) or line.strip() == "#":
            break
        lines.append(line[1:].strip())
    return " ".join(lines)


def config_file(name: str | Path, folder: str = "", what: str = "config file") -> Path:
    """A YAML path as given, else a shipped config by name (`sort`, `recipes/r1`, or `r1` in `folder`; a one-stage
    recipe's name, `smollm2_full`, as well: `rlvr train` runs it)."""
    path = Path(name)
    if path.is_file():
        return path
    for candidate in (SHIPPED_CONFIGS / folder / path, SHIPPED_CONFIGS / path, SHIPPED_CONFIGS / "recipes" / path):
        for shipped in (candidate, candidate.with_name(candidate.name + ".yaml")):
            if shipped.is_file():
                return shipped
    if path.is_dir():
        raise ConfigError(f"{what} {str(name)!r} is a folder, not a YAML file")
    raise ConfigError(f"{what} {str(name)!r} does not exist (nor is it a shipped config under {SHIPPED_CONFIGS})")


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping: PyYAML keeps the last one silently, so
    `train: {steps: 3}` then `train: {steps: 4}` would drop the first section without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges may be overridden on purpose; other keys are refused by PyYAML
            key = self.construct_object(key_node)
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> value; a syntax error or a duplicate key is one ConfigError line naming `where` and the
    error's line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: builds no Python objects
    except _DuplicateKey as err:
        raise ConfigError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML{at} ({problem})") from None


def read_yaml(path: Path) -> Any:
    """A YAML file's value; invalid YAML or bytes that are not UTF-8: one ConfigError line naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return parse_yaml(text, str(path))


def load_config(path: str | Path | None = None, overrides: list[str] = (), base: dict | None = None,
                cls: type = Config) -> Any:
    """YAML file or shipped config name (or `base` dict) + `key=value` overrides -> validated config of class `cls`
    (the RL run's Config, or an offline command's: `rlvr.config.offline`)."""
    raw: dict = dict(base or {})
    if path is not None:
        path = config_file(path)
        loaded = read_yaml(path)
        if loaded is None:  # no YAML in the file (even beside --set): it silently trained the default config
            raise ConfigError(f"{path}: the config is empty; give at least one section (see configs/)")
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
        raw.update(loaded)
    if cls is not Config:
        return _load_other(cls, raw, overrides)
    cfg = from_dict(Config, _with_preset(raw, overrides))
    apply_overrides(cfg, overrides)
    return validate(cfg)


def _load_other(cls: type, raw: dict, overrides: list[str]) -> Any:
    """A config of another command: one that reads a part of the RL config (`cls.READS_FILE_OF`, `rlvr sft`) takes
    such a file, leaving out the keys it does not read, and refuses them from --set (`cls.refuse(key)`)."""
    wider = getattr(cls, "READS_FILE_OF", None)
    if wider is not None:
        cls.check_file(raw)
        raw = _keys_read(raw, cls, wider)
        for item in overrides:
            key = item.partition("=")[0]
            if _is_key(wider, key) and not _is_key(cls, key):
                cls.refuse(key)
    cfg = from_dict(cls, raw)
    apply_overrides(cfg, overrides)
    cfg.validate()
    return cfg


def _is_key(cls: type, key: str) -> bool:
    """Whether the dotted `key` is a field of `cls` (or inside a free-form option of one)."""
    for part in key.split("."):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        cls = hints[part]
        if not is_dataclass(cls):
            return True
    return True


def _keys_read(raw: dict, cls: type, wider: type) -> dict:
    """`raw` without the keys of the `wider` config that `cls` does not have (other keys stay, to be reported)."""
    hints, wide = typing.get_type_hints(cls), typing.get_type_hints(wider)
    out = {}
    for key, value in raw.items():
        if key not in hints:
            if key not in wide:
                out[key] = value  # not a key of either: from_dict names it
            continue
        if is_dataclass(hints[key]) and isinstance(value, dict) and is_dataclass(wide.get(key)):
            value = _keys_read(value, hints[key], wide[key])
        out[key] = value
    return out


def _with_preset(raw: dict, overrides: list[str]) -> dict:
    """The preset's keys (rlvr.presets) under the file's when the file names it, over them when --set does
    (`--set algorithm.preset=dapo` on a file that spells out GRPO runs DAPO); --set keys are applied later."""
    sets = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "algorithm.preset"]
    section = raw.get("algorithm")
    name = sets[-1] if sets else section.get("preset") if isinstance(section, dict) else None
    if name in (None, "", "null", "none"):
        return raw
    try:
        preset = nested(get_preset(name).overrides)
    except ValueError as err:
        raise ConfigError(f"algorithm.preset: {err}") from None
    return deep_merge(raw, preset) if sets else deep_merge(preset, raw)


def with_absolute_paths(cfg: Config) -> Config:
    """A copy with every file or folder path made absolute (from the current folder): out_dir, model.path,
    value.path (not an embedded model's name), sft.data, and the `path` / `*_path` options of the task and its reward terms. A run's saved
    config.yaml holds these, so `rlvr train --resume RUN` works from any folder (relative paths were read
    from wherever the resume ran)."""
    def absolute(value: Any) -> Any:
        return os.path.abspath(value) if isinstance(value, (str, Path)) and str(value) else value

    def model(value: Any) -> Any:  # an embedded model's name is a name, unless a path of that name exists
        return value if value in EMBEDDED_MODELS and not Path(value).exists() else absolute(value)

    def options(opts: Any) -> Any:
        if not isinstance(opts, dict):
            return opts
        return {k: absolute(v) if k == "path" or k.endswith("_path") else v for k, v in opts.items()}

    out = copy.deepcopy(cfg)
    out.out_dir = absolute(out.out_dir)
    out.model.path, out.value.path, out.sft.data = model(out.model.path), model(out.value.path), absolute(out.sft.data)
    out.task.options = options(out.task.options)
    out.task.rewards = [{**term, "options": options(term.get("options"))} if isinstance(term, dict)
                        and isinstance(term.get("options"), dict) else term for term in out.task.rewards]
    return out


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(asdict(cfg), sort_keys=False))


def config_help(config: Any = Config, prefix: str = "") -> list[str]:
    """`key (default): help` for every field of a config (a class, or an instance whose values are the defaults
    shown), nested sections flattened with dots; a field's range or choices follow its help."""
    config = config() if isinstance(config, type) else config
    lines = []
    for fld in fields(config):
        value = getattr(config, fld.name)
        if is_dataclass(value):
            lines += config_help(value, f"{prefix}{fld.name}.")
            continue
        meta = fld.metadata
        allowed = f" [{' | '.join(map(str, meta['choices']))}]" if meta.get("choices") else ""
        bound = bound_text(meta)
        allowed += f" [{bound}]" if bound else ""
        lines.append(f"{prefix}{fld.name} ({value!r}): {meta.get('help', '')}{allowed}")
    return lines


# --- parsing: YAML / --set values -> typed fields ---------------------------------------------

_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def _unknown(key: str, name: str, cls: type) -> ConfigError:
    """An unknown key named with the one meant (`rlvr.config.fields.key_meant`), else every key."""
    prefix = key[: len(key) - len(name)]  # "train." for "train.stpes"
    meant = key_meant(name, cls)
    hint = f"; did you mean {prefix + meant!r}?" if meant else f"; valid keys: {', '.join(typing.get_type_hints(cls))}"
    return ConfigError(f"unknown config key {key!r}{hint}")


def _scalar(value: Any, tp: type, key: str, cli: bool) -> Any:
    """`value` as `tp` (int, float, bool, str, dict, list); CLI strings are parsed, YAML is checked."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if cli and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if cli and value.lstrip("-").isdigit():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp in (dict, list):
        parsed = parse_yaml(value, f"--set {key}") if cli else value
        if isinstance(parsed, tp):
            return parsed
    shown = value if cli else f"{value!r} ({type(value).__name__})"
    raise ConfigError(f"{key}: expected {tp.__name__}, got {shown}")


def _coerce(value: Any, tp: Any, key: str, cli: bool) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (cli and value.lower() in ("null", "none", ""))):
            return None
        tp = next(a for a in args if a is not type(None))
    if value is None:
        raise ConfigError(f"{key}: expected {getattr(tp, '__name__', tp)}, got null")
    return _scalar(value, typing.get_origin(tp) or tp, key, cli)


def from_dict(cls: type, raw: dict, prefix: str = "") -> Any:
    """Build dataclass `cls` from a nested dict over its defaults (a section's own, e.g. an offline trainer's
    OptimConfig(lr=1e-6)), rejecting unknown keys and wrong types."""
    return _fill(cls(), raw, prefix)


def _fill(obj: Any, raw: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(type(obj))
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if name not in hints:
            raise _unknown(key, str(name), type(obj))
        if is_dataclass(hints[name]):
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a section (mapping), got {value!r}")
            _fill(getattr(obj, name), value, f"{key}.")
        else:
            setattr(obj, name, _coerce(value, hints[name], key, cli=False))
    return obj


def _option_value(value: str, key: str) -> Any:
    """A free-form option's --set value (its type is the task's, unknown here), read as YAML (numbers,
    booleans, [lists], {mappings}); other text that YAML cannot read or reads as a block mapping is meant as
    written: `template=Q: {question} A:` is that string. The task checks the value's type when it is built."""
    flow = value.lstrip().startswith(("[", "{"))
    try:
        parsed = parse_yaml(value, f"--set {key}")
    except ConfigError:
        if flow:
            raise
        return value
    return value if isinstance(parsed, dict) and not flow else parsed


def apply_overrides(cfg: Any, overrides: list[str], prefix: str = "") -> None:
    """Apply `a.b=value` strings in place; the value is parsed as the field's type. Errors name `prefix + key`
    (a recipe stage's options: `STAGE.key`)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {prefix + item!r}")
        obj, parts = cfg, key.split(".")
        for i, part in enumerate(parts):
            if isinstance(obj, dict):  # free-form options, e.g. task.options.length=5
                for sub in parts[i:-1]:
                    obj = obj.setdefault(sub, {})
                obj[parts[-1]] = _option_value(value, prefix + key)
                break
            hints = typing.get_type_hints(type(obj))
            if part not in hints:
                raise _unknown(prefix + ".".join(parts[: i + 1]), part, type(obj))
            if i == len(parts) - 1:
                if is_dataclass(hints[part]):
                    raise ConfigError(f"{prefix}{key} is a section; set one of its keys, e.g. {prefix}{key}.<key>=...")
                setattr(obj, part, _coerce(value, hints[part], prefix + key, cli=True))
            else:
                obj = getattr(obj, part)
