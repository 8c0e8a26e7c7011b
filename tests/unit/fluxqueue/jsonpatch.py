"""A small RFC 6902 JSON Patch applier (add, remove, replace, test), for the tests: what the API
server does with a webhook's patch and with the controller's JSON patches."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    pass


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    for token in tokens[:-1]:
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        try:
            parent, last = _parent(doc, tokens), tokens[-1]
            kind = op["op"]
            if kind == "test":
                value = parent[int(last)] if isinstance(parent, list) else parent[last]
                if value != op["value"]:
                    raise PatchError(f"test failed at {op['path']}: {value!r} != {op['value']!r}")
            elif kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), op["value"])
                else:
                    parent[last] = op["value"]
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = op["value"]
                else:
                    if last not in parent:
                        raise PatchError(f"replace of missing {op['path']}")
                    parent[last] = op["value"]
            else:
                raise PatchError(f"unsupported op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchError(f"{op}: {exc!r}") from None
    return doc
