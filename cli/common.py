"""What every nmt command shares: plugins loaded before flags are built, the config resolved
from its layers, and errors printed as one line with a non-zero exit.

A command module defines its config dataclass and a ``run(cfg)`` function, then::

    main = config_command("nmt-preprocess", PreprocessJob, run, help=__doc__)
"""

from __future__ import annotations

import errno
import sys
import traceback
from typing import Any, Callable, Protocol

import click

from nmt.config.cli_options import GroupedCommand, click_options, flag_specs, flags_given
from nmt.config.loader import Preset, resolve_config
from nmt.errors import NmtError
from nmt.plugin_loader import load_plugins


def _prescan(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` in argv (``--flag X`` or ``--flag=X``), before click parses it:
    plugins must be imported before their flags can be generated."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def report_error(prog: str, error: BaseException, debug: bool) -> int:
    """Print ``error`` as one line on stderr (the traceback too with --debug); return the exit code."""
    if debug:
        traceback.print_exception(error)
    if isinstance(error, NmtError):
        click.echo(f"{prog}: error: {error}", err=True)
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        click.echo(f"{prog}: interrupted", err=True)
        return 130
    if isinstance(error, MemoryError):
        click.echo(f"{prog}: error: out of memory; lower --max-tokens / --batch-size or --workers", err=True)
        return 1
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f"{error.filename}: " if error.filename else ""
        click.echo(f"{prog}: error: {where}the disk is full ({error.strerror}); free some space or write "
                   "to another folder, then run again (finished steps are kept)", err=True)
        return 1
    if isinstance(error, OSError) and error.filename:
        click.echo(f"{prog}: error: {error.filename}: {error.strerror}", err=True)
        return 1
    where = "" if debug else " (run again with --debug for the traceback)"
    click.echo(f"{prog}: internal error: {type(error).__name__}: {error}{where}", err=True)
    return 1


def flag_value(path: str) -> Any:
    """The value the running command's flag of config key ``path`` (``generation.search.name``) was given on the
    command line, or None (not given, or not called from the command line)."""
    ctx = click.get_current_context(silent=True)
    return ctx.params.get(path.replace(".", "__")) if ctx is not None else None


class EntryPoint(Protocol):
    """A command's ``main``: the console script calls it with no arguments (argv from sys.argv)."""

    def __call__(self, argv: list[str] | None = None) -> None: ...


def config_command(prog: str, schema: type, run: Callable[[Any], Any], *, help: str | None = None,
                   arguments: dict[str, str] | None = None, preset: Preset | None = None,
                   extra_params: list[click.Parameter] | None = None,
                   plugin_kinds: tuple[str, ...] | None = None) -> EntryPoint:
    """Build the console-script entry point of a command driven by config dataclass ``schema``.

    ``arguments`` maps positional argument names to config paths (``{"data": "task.data"}``).
    ``run`` receives the resolved config as a typed dataclass object. ``plugin_kinds`` limits the
    built-in plugins imported to those folders (see ``load_builtin_plugins``)."""
    arguments = arguments or {}

    def main(argv: list[str] | None = None) -> None:
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        try:
            load_plugins(_prescan(argv, "--user-dir"), plugin_kinds)
            command = _build(prog, schema, run, help, arguments, preset, extra_params or [])
            command.main(argv, prog_name=prog, standalone_mode=False)
            sys.exit(0)
        except SystemExit:
            raise
        except click.exceptions.Exit as e:  # --help and friends
            sys.exit(e.exit_code)
        except click.ClickException as e:  # click's own usage errors (unknown flag, bad value): one line too
            if debug:
                traceback.print_exception(e)
            hint = f" (see {prog} --help)" if isinstance(e, click.UsageError) else ""
            click.echo(f"{prog}: error: {e.format_message()}{hint}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:  # click turns Ctrl-C into Abort
            sys.exit(report_error(prog, KeyboardInterrupt(), debug))
        except BaseException as e:  # noqa: BLE001 - every failure ends as one line + exit code
            sys.exit(report_error(prog, e, debug))

    main.nmt_schema = schema  # type: ignore[attr-defined]  # read by the generated config reference
    return main


def _build(prog: str, schema: type, run: Callable[[Any], Any], help: str | None, arguments: dict[str, str],
           preset: Preset | None, extra_params: list[click.Parameter]) -> click.Command:
    specs = flag_specs(schema)
    params: list[click.Parameter] = [
        click.Argument([name], required=False) for name in arguments
    ]
    params += click_options(specs)
    params += extra_params
    config_opt = click.Option(["--config", "config_file"], type=click.Path(dir_okay=False), default=None,
                              help="YAML file of config values (below flags and key=value in precedence).")
    config_opt.nmt_group = "config"  # type: ignore[attr-defined]
    params.append(config_opt)
    params.append(click.Argument(["overrides"], nargs=-1))

    def callback(**kwargs: Any) -> None:
        from omegaconf import OmegaConf

        flags = flags_given(kwargs, specs)
        for name, path in arguments.items():
            if kwargs.get(name) is not None:
                flags[path] = kwargs[name]
        # A positional that is really a key=value override (click cannot tell them apart).
        overrides = list(kwargs["overrides"])
        for name in list(arguments):
            value = kwargs.get(name)
            if isinstance(value, str) and "=" in value and not value.startswith(("/", ".")):
                overrides.insert(0, value)
                flags.pop(arguments[name], None)
        cfg = resolve_config(schema, yaml_file=kwargs["config_file"], flags=flags, overrides=overrides,
                             preset=preset)
        extras = {p.name: kwargs[p.name] for p in extra_params}
        obj = OmegaConf.to_object(cfg)
        run(obj, **extras) if extras else run(obj)

    return GroupedCommand(prog, params=params, callback=callback, help=help,
                          context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
