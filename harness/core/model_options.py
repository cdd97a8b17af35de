"""Command-line options derived from a pydantic options model: one source of names, defaults, help and types.

A model field becomes ``--field-name`` (or ``Flag(flag=...)``), its ``Field(description=...)`` the help, its
default the shown default, its ``Literal`` values the listed choices. The command line hands the model each value's
text (a bool flag aside) and the model's value types check it (``harness.core.option_values``), exactly as they check
a config file's value, a resumed manifest's or a Python caller's: one check per value, whatever the door.
A command overlays, in order, the model defaults, a preset, a config file (``load_config``: YAML or JSON, field
names as keys) and the flags given on the command line (``given_on_command_line``). An ``OptionsModel`` refuses a bad
value with an ``OptionError`` (a ``UsageError``, exit 2) naming the flag and the fix, the same at every door; the
door itself is its ``source`` (``--config run.yaml``, a manifest), printed on a line of its own.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from harness.core.errors import UsageError
from harness.core.option_values import OPTION_VALUE, shown


@dataclass(frozen=True)
class Flag:
    """How an options-model field appears on the command line (put it in the field's ``Annotated`` metadata)."""

    panel: str = "Options"
    flag: str | None = None
    """The option name when it is not ``--field-name``; ``--a/--no-a`` for a tri-state bool."""
    default_text: str | None = None
    """The default as shown in ``--help`` when the model's is not readable there (a factory, a None meaning)."""
    repeat: bool = False
    """A list given as a repeated option (``--x A --x B``)."""


def flag_of(info: FieldInfo) -> Flag:
    return next((m for m in info.metadata if isinstance(m, Flag)), Flag())


def flag_name(name: str, info: FieldInfo) -> str:
    """The option's primary name: ``--request-timeout`` for ``request_timeout_s`` when its Flag says so."""
    f = flag_of(info)
    return (f.flag or "--" + name.replace("_", "-")).split("/")[0]


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return None


def _scalar(annotation: Any) -> Any:
    """The field's scalar type: int, float, bool or str (``X | None`` -> X; ``Annotated[X, ...]`` -> X; anything
    else: str)."""
    if typing.get_origin(annotation) is Annotated:
        return _scalar(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _scalar(args[0]) if len(args) == 1 else str
    return annotation if annotation in (int, float, str, bool) else str


METAVARS = {int: "<int>", float: "<float>", str: "<str>"}


def _shown_default(info: FieldInfo, f: Flag) -> str | bool:
    if f.default_text is not None:
        return f.default_text
    if info.default_factory is not None or info.default is None:
        return False
    return str(info.default)


def model_parameters(model: type[BaseModel], only: set[str] | None = None) -> list[inspect.Parameter]:
    """A keyword parameter per field of ``model`` (or of the fields in ``only``), annotated with its typer option.
    Their defaults are None: only what the command line gave is overlaid, so the model stays the one place that
    holds a default (``--help`` shows it)."""
    import typer

    params: list[inspect.Parameter] = []
    for name, info in model.model_fields.items():
        f = flag_of(info)
        if only is not None and name not in only:
            continue
        choices = _choices(info.annotation)
        scalar = _scalar(info.annotation)
        if f.repeat:
            py: Any = list[str]
            default: Any = []
        else:  # the text of every non-bool value goes to the model, whose value types check it at every door
            py = Optional[bool if scalar is bool else str]
            default = None
        decls = [f.flag or "--" + name.replace("_", "-")]
        option = typer.Option(
            *decls,
            help=info.description,
            rich_help_panel=f.panel,
            show_default=_shown_default(info, f),
            metavar="|".join(map(str, choices)) if choices else (None if scalar is bool else METAVARS[scalar]),
        )
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[py, option])
        )
    return params


def with_parameters(fn: Callable[..., Any], extra: list[inspect.Parameter]) -> Callable[..., Any]:
    """``fn`` (taking ``**options``) presented to typer with ``extra`` parameters after its own named ones."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    fn.__signature__ = sig.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
    fn.__annotations__ = {**{p.name: p.annotation for p in [*own, *extra]}, "return": None}
    return fn


def given_on_command_line(ctx: Any, values: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The model fields whose flags the command line gave, as the model's values (list fields parsed)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        source = ctx.get_parameter_source(name) if name in values else None
        if getattr(source, "name", None) not in (
            "COMMANDLINE",
            "ENVIRONMENT",
        ):  # typer's vendored click has its own enum
            continue
        raw = values[name]
        out[name] = list(raw) if flag_of(info).repeat else raw
    return out


def load_config(path: Path, model: type[BaseModel]) -> dict[str, Any]:
    """A config file's options (YAML or JSON mapping of field names); unknown keys and bad values are usage errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"--config {path}: cannot read it ({exc.strerror})", fix="pass an existing YAML or JSON file"
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--config {path}: not UTF-8 text (byte {exc.start})", fix="save the file as UTF-8 YAML or JSON"
        ) from None
    import yaml

    try:  # YAML 1.2 is a superset of JSON: one parser reads both
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(
            f"--config {path}: not valid YAML or JSON ({exc})",
            fix="fix the file (--print-config writes a valid one)",
        ) from None
    if data is None or data == {}:
        raise UsageError(
            f"--config {path}: holds no options",
            fix="write one option per line, e.g. repeats: 3 (--print-config writes them all)",
        )
    if not isinstance(data, dict):
        raise UsageError(
            f"--config {path}: expected a mapping of option names to values, got {type(data).__name__}",
            fix="write one option per line, e.g. repeats: 3",
        )
    unknown = sorted(set(data) - set(model.model_fields))
    if unknown:
        raise UsageError(
            f"--config {path}: unknown option(s) {', '.join(map(repr, unknown))}",
            fix="use the names --print-config writes: " + ", ".join(model.model_fields),
        )
    return data


class OptionError(UsageError):
    """A bad option value: the same message, fix and exit code at every door; ``source`` says which door (None: a
    flag or the Python API), ``field`` which option. Exit 2, or the value check's own (a missing input file: 3)."""

    def __init__(
        self,
        message: str,
        fix: str | None,
        field: str | None = None,
        source: str | None = None,
        exit_code: int = UsageError.exit_code,
    ) -> None:
        super().__init__(message, fix)
        self.field = field
        self.source = source
        self.exit_code = exit_code


def _field_info(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, FieldInfo | None]:
    """The option a validation error's location names (a field of a nested block names its own flag)."""
    name, info, current = "", None, model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if not isinstance(part, str) or not fields or part not in fields:
            break
        name, info = part, fields[part]
        current = info.annotation
    return name, info


def option_error(model: type[BaseModel], exc: ValidationError, source: str | None = None) -> OptionError:
    """The first error of a model's validation as an ``OptionError`` naming the flag and the fix (a bad value given
    before a required one missing)."""
    err = min(exc.errors(), key=lambda e: e["type"] == "missing")
    name, info = _field_info(model, tuple(err["loc"]))
    flag = flag_name(name, info) if info is not None else "an option"
    ctx = err.get("ctx") or {}
    if err["type"] == OPTION_VALUE:
        return OptionError(str(ctx["message"]), str(ctx["fix"]) or None, name, source, int(ctx["exit_code"]))
    if err["type"] == "missing":
        return OptionError(f"{flag} is required", f"pass {flag} (or set it in a --config file)", name, source)
    choices = _choices(info.annotation) if info is not None else None
    if choices:
        return OptionError(
            f"unknown {flag} {err.get('input')!r}", f"use {flag} " + " or ".join(map(str, choices)), name, source
        )
    if info is None and err["type"] == "extra_forbidden":
        return OptionError(
            f"unknown option {'.'.join(map(str, err['loc']))!r}",
            "use the names --print-config writes: " + ", ".join(model.model_fields),
            None,
            source,
        )
    what = f": {info.description}" if info is not None and info.description else ""
    given = err.get("input")
    return OptionError(  # the value as its flag text: "got 0" from a flag and from a config file's number alike
        f"{flag}: {err['msg'][0].lower()}{err['msg'][1:]} (got {given if isinstance(given, str) else shown([given])})",
        f"give {flag} a valid value{what}",
        name,
        source,
    )


class OptionsModel(BaseModel):
    """An options model whose bad value is an ``OptionError`` however it is built (``Model(...)``,
    ``Model.model_validate(...)``): the Python API refuses a value exactly as a flag or a config file does."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise option_error(type(self), exc) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise option_error(cls, exc) from None


def build(model: type[BaseModel], values: dict[str, Any], sources: dict[str, str] | None = None) -> Any:
    """The model from resolved values; a bad value is an ``OptionError`` naming its flag and the fix, and (from
    ``sources``: option -> door) where the value came from."""
    try:
        return model(**values)
    except ValidationError as exc:
        err = option_error(model, exc)
    except OptionError as exc:
        err = exc
    err.source = err.source or (sources or {}).get(err.field or "")
    raise err


def to_yaml(options: BaseModel) -> str:
    """The options as a YAML config file (``--config`` reads it back to the same options)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        """One line per option; a list of scalars inline (``[0, 1]``), a list of lists one item per line."""

    def represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> Any:
        flat = not any(isinstance(x, (list, tuple, dict)) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)

    Dumper.add_representer(list, represent_list)
    return yaml.dump(options.model_dump(mode="json"), Dumper=Dumper, sort_keys=False, default_flow_style=False)


CONFIG_PANEL = "Config file"


def config_parameters(command: str) -> list[inspect.Parameter]:
    """``--config FILE`` and ``--print-config`` for a command whose options come from a model (``resolve_options``
    reads them)."""
    import typer

    config = typer.Option(
        "--config",
        help=f"options from a YAML/JSON file (the names {command} --print-config writes), under the flags given",
        rich_help_panel=CONFIG_PANEL,
    )
    printed = typer.Option(
        "--print-config",
        help="print the resolved options as YAML (a --config file) and exit",
        rich_help_panel=CONFIG_PANEL,
    )
    kw = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter("config", kw, default=None, annotation=Annotated[Optional[Path], config]),
        inspect.Parameter("print_config", kw, default=False, annotation=Annotated[bool, printed]),
    ]


def options_command(fn: Callable[..., Any], model: type[BaseModel], command: str) -> Callable[..., Any]:
    """``fn(ctx, ..., **options)`` presented to typer with a flag per field of ``model``, then ``--config`` and
    ``--print-config``; ``resolve_options(ctx, model, options)`` turns what it receives into the model."""
    return with_parameters(fn, [*model_parameters(model), *config_parameters(command)])


def overlay(
    model: type[BaseModel], preset: dict[str, Any], config: Path | None, cli: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values a command's options are built from (``preset``, then the ``config`` file, then the command line)
    and, for each value the config file gave, its door (``--config FILE``) for ``build``'s message."""
    values = dict(preset)
    sources: dict[str, str] = {}
    if config is not None:
        from_file = load_config(config, model)
        values.update(from_file)
        sources = {k: f"--config {config} (key {k})" for k in from_file if k not in cli}
    values.update(cli)
    return values, sources


def resolve_options(
    ctx: Any, model: type[BaseModel], given: dict[str, Any], preset: dict[str, Any] | None = None
) -> Any:
    """The model's defaults, overlaid by ``preset``, then the ``--config`` file, then the flags the command line gave.
    With ``--print-config`` the options are printed as YAML and the command ends (exit 0)."""
    values, sources = overlay(model, preset or {}, given.get("config"), given_on_command_line(ctx, given, model))
    options = build(model, values, sources)
    if given.get("print_config"):
        import typer

        typer.echo(to_yaml(options), nl=False)
        raise typer.Exit(0)
    return options
