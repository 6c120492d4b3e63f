"""Griffe extension for the docs site (mkdocs.yml): kstore's docstrings use Sphinx roles.

``:func:`kstore.compact```, ``:class:`~kstore.errors.CommitConflictError```, ... become
mkdocs-autorefs cross-references: a link where the target is rendered in the API reference,
plain code where it is not (``optional``: private helpers are named but not documented).
Identifiers without a module (``:func:`plan_read```) are looked up next to the object whose
docstring names them. reST literal-block markers (a paragraph ending in ``::``) become a
plain colon, since the indented block after them is already a Markdown code block.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?P<role>func|meth|class|exc|attr|data|obj|mod|const):`(?P<body>[^`]+)`")
_EXPLICIT = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_LITERAL_MARKER = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)
_BARE_LITERAL_MARKER = re.compile(r"^[ \t]*::[ \t]*$", re.MULTILINE)


def _identifier(target: str, obj: griffe.Object) -> str:
    """``target`` as a full dotted path, resolved against the module holding ``obj``."""
    target = target.lstrip(".")
    if target.startswith("kstore"):
        return target
    parent: Any = obj if isinstance(obj, griffe.Module) else obj.parent
    while parent is not None:
        head = target.split(".", 1)[0]
        if head in parent.members:
            return f"{parent.path}.{target}"
        parent = parent.parent
    return target  # a builtin or another library's name: left unresolved (optional)


def convert(text: str, obj: griffe.Object) -> str:
    """Replace the Sphinx roles and ``::`` markers in one docstring."""

    def ref(match: re.Match[str]) -> str:
        role, body = match.group("role"), match.group("body").strip()
        explicit = _EXPLICIT.match(body)
        if explicit:
            title, target = explicit.group("title"), explicit.group("target").lstrip("~")
        else:
            target = body.lstrip("~")
            title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
            if role in ("func", "meth") and not title.endswith(")"):
                title += "()"
        identifier = html.escape(_identifier(target, obj), quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(title)}</code></autoref>'

    text = _ROLE.sub(ref, text)
    text = _BARE_LITERAL_MARKER.sub("", text)
    return _LITERAL_MARKER.sub(":", text)


class SphinxRoles(griffe.Extension):
    """Rewrite every loaded docstring once it is attached to its object."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value, obj)
