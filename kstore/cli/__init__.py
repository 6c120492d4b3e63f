"""The ``kstore`` command line: inspect, query and maintain datasets (click + rich).

Examples (shell)::

    kstore --version
    kstore ls ./store
    kstore info ./store sales --json
    kstore plan ./store sales --where "location == 7" --where "day >= 2024-01-20"
    kstore plan ./store sales --where "location==7 and qty > 3 or name in ('a', 'b')"
    kstore read ./store sales --where "location in [7, 8]" --or --where "qty > 40" --columns day,location --limit 5
    kstore history ./store sales
    kstore stats ./store sales --files
    kstore diff ./store sales 0 3 --json
    kstore gc ./store sales --retention-days 7 --dry-run
    kstore delete ./store old_sales --yes
    kstore copy ./store sales --to s3://bucket/prefix --as sales_backup
    kstore build-indices ./store sales product

A ``--where`` is ``column op value`` terms joined by ``and`` / ``or`` (``and`` binds tighter;
operators need no spaces: ``x==7``); several ``--where`` are ANDed and ``--or`` starts a new
conjunction. Values are quoted strings, numbers, lists (``[1, 2]``, ``(1, 2)``), Python
literals (``None``) or bare text (dates and timestamps as ISO text are converted to the
column type by the planner). Every read-only command takes ``--json``. In the output a
*partition* is one value of the partition keys (``day=2024-01-02``); it holds *files*.

Exit codes: 0 success; 1 an error kstore reports (a missing dataset or store, a predicate on
a missing column or with a value of the wrong type, a refused destructive command ...: the
message is on stderr, no traceback); 2 a usage error (unknown option, bad value, a
``--where`` that cannot be parsed). ``delete`` and ``gc`` ask before deleting on a
terminal and refuse without ``--yes`` elsewhere; ``--dry-run`` only reports.

>>> from click.testing import CliRunner
>>> CliRunner().invoke(cli, ["ls", "memory://cli-doc"]).exit_code
0
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any, TextIO

import click

from kstore._version import __version__
from kstore.cli import maintain, readonly
from kstore.cli._common import UserError, parse_where, settled_help_option
from kstore.errors import KstoreError

__all__ = ["cli", "main", "parse_where"]


class _Group(click.Group):
    """Turns every :class:`~kstore.errors.KstoreError` into exit code 1 with the message on stderr."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KstoreError as exc:
            raise UserError(str(exc)) from exc

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        return settled_help_option(super().get_help_option(ctx))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="kstore", message="%(prog)s %(version)s",
                      default=False)
@click.option("-v", "--verbose", count=True, help="Log what kstore does (-vv: debug) on stderr.")
def cli(verbose: int) -> None:
    """Inspect, query and maintain kstore (and kartothek/plateau) datasets.

    STORE is a directory, file:///path, memory://name, s3://bucket/prefix or another
    minimalkv URL; DATASET is the dataset's name (uuid).
    """
    if verbose:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("kstore").setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


for _command in (readonly.ls, readonly.info, readonly.plan, readonly.read, readonly.history, readonly.stats, readonly.diff,
                 maintain.gc, maintain.delete, maintain.copy, maintain.compact, maintain.build_indices,
                 maintain.restore, maintain.upgrade):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the ``kstore`` command line on ``argv``; return the exit code.

    Parameters
    ----------
    argv
        The arguments (default: ``sys.argv[1:]``).
    out
        Replaces stdout (for embedding); errors go to stderr.

    Returns
    -------
    int
        0 success, 1 an error kstore reports, 2 a usage error.

    Examples
    --------
    >>> import io
    >>> buf = io.StringIO()
    >>> main(["ls", "memory://main-doc", "--json"], out=buf), buf.getvalue().strip()
    (0, '[]')
    """
    redirect = contextlib.redirect_stdout(out) if out is not None else contextlib.nullcontext()
    with redirect:
        try:
            rv = cli.main(args=list(argv) if argv is not None else None, prog_name="kstore", standalone_mode=False)
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.ClickException as exc:
            exc.show()
            return exc.exit_code
        except click.Abort:
            click.echo("Aborted!", err=True)
            return 1
    return rv if isinstance(rv, int) else 0
