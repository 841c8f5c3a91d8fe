"""Compare the client's TypedDicts with JSON schemas (OpenAPI) and with live answers."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


def is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__")


def _members(hint: Any) -> list[Any]:
    if get_origin(hint) in (Union, types.UnionType):
        return [m for a in get_args(hint) for m in _members(a)]
    return [hint]


def _pick(hint: Any, want: str) -> Any:
    """The member of a (possibly Union) hint that is a TypedDict / list / dict / Literal."""
    for member in _members(hint):
        origin = get_origin(member)
        if want == "typeddict" and is_typeddict(member):
            return member
        if want == "list" and origin is list:
            return member
        if want == "dict" and (origin is dict or member is dict):
            return member
        if want == "literal" and origin is Literal:
            return member
    return None


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while True:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            schema = doc["components"]["schemas"][name]
        elif "allOf" in schema:
            # A named schema narrowed by constraints (`not`, bounds): its fields are the named one's.
            schema = next(s for s in schema["allOf"] if "$ref" in s or "properties" in s)
        else:
            return schema


def compare(doc: dict[str, Any], schema: dict[str, Any], hint: Any, where: str, problems: list[str]) -> None:
    """Every property of `schema` must be a key of the TypedDict `hint` and the other way round,
    recursively through objects, arrays, maps and enums."""
    schema = resolve(doc, schema)
    if "oneOf" in schema:
        # Each variant must be one of the client's alternatives (a Union hint).
        for variant in schema["oneOf"]:
            if variant.get("type") == "null":
                if type(None) not in _members(hint):
                    problems.append(f"{where}: the document allows null, the client has {hint!r}")
                continue
            if "$ref" not in variant:
                compare(doc, variant, hint, where, problems)  # an inline object
                continue
            name = variant.get("$ref", "").rsplit("/", 1)[-1]
            members = [m for m in _members(hint) if is_typeddict(m) and m.__name__.removesuffix("Body") == name]
            if not members:
                problems.append(f"{where}: variant {name} unknown to the client ({hint!r})")
                continue
            compare(doc, variant, members[0], where, problems)
        return
    if "properties" in schema:
        td = _pick(hint, "typeddict")
        if td is None:
            problems.append(f"{where}: the document has an object with fields, the client has {hint!r}")
            return
        known = get_type_hints(td)
        documented = schema["properties"]
        for name in sorted(set(documented) - set(known)):
            problems.append(f"{where}.{name}: in the OpenAPI document, unknown to the client ({td.__name__})")
        for name in sorted(set(known) - set(documented)):
            problems.append(f"{where}.{name}: known to the client ({td.__name__}), not in the OpenAPI document")
        required_doc = set(schema.get("required", []))
        required_client = set(getattr(td, "__required_keys__", set()))
        if required_doc != required_client and where.endswith("request"):
            problems.append(f"{where}: required fields {sorted(required_doc)} in the document, client has {sorted(required_client)}")
        for name in sorted(set(documented) & set(known)):
            compare(doc, documented[name], known[name], f"{where}.{name}", problems)
        return
    if "items" in schema:
        member = _pick(hint, "list")
        if member is None:
            problems.append(f"{where}: the document has an array, the client has {hint!r}")
            return
        compare(doc, schema["items"], get_args(member)[0], f"{where}[]", problems)
        return
    if isinstance(schema.get("additionalProperties"), dict):
        member = _pick(hint, "dict")
        if member is None or not get_args(member):
            problems.append(f"{where}: the document has a map, the client has {hint!r}")
            return
        compare(doc, schema["additionalProperties"], get_args(member)[1], f"{where}{{}}", problems)
        return
    values = schema.get("enum") or ([schema["const"]] if "const" in schema else None)
    if values is not None:
        member = _pick(hint, "literal")
        if member is None:
            if "const" in schema:
                return  # a constant string the client keeps as `str`
            problems.append(f"{where}: the document has an enum, the client has {hint!r}")
            return
        missing = set(values) - set(get_args(member))
        extra = set(get_args(member)) - set(values)
        if missing:
            problems.append(f"{where}: values {sorted(missing)} in the document, unknown to the client")
        if extra:
            problems.append(f"{where}: values {sorted(extra)} known to the client, not in the document")


def unknown_keys(body: Any, hint: Any, where: str = "$") -> list[str]:
    """Keys of a live answer that the client's TypedDict `hint` does not know (recursively)."""
    found: list[str] = []
    td = _pick(hint, "typeddict")
    if isinstance(body, dict) and td is not None:
        known = get_type_hints(td)
        for key, value in body.items():
            if key not in known:
                found.append(f"{where}.{key}")
            else:
                found += unknown_keys(value, known[key], f"{where}.{key}")
    elif isinstance(body, list) and (member := _pick(hint, "list")) is not None:
        for i, item in enumerate(body):
            found += unknown_keys(item, get_args(member)[0], f"{where}[{i}]")
    elif isinstance(body, dict) and (member := _pick(hint, "dict")) is not None and get_args(member):
        for key, value in body.items():
            found += unknown_keys(value, get_args(member)[1], f"{where}{{{key}}}")
    return found


__all__ = ["compare", "resolve", "unknown_keys"]
