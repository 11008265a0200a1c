"""A small JSON-schema validator for tool arguments, with messages written for a model to act on.

It covers the subset the tools declare (checked when a tool is registered, so a schema can never
silently use a keyword that is not enforced): ``type`` (one name or a list), ``properties``,
``required``, ``additionalProperties: false``, ``enum``, ``minimum``/``maximum``,
``minLength``/``maxLength``, ``items``, ``minItems``/``maxItems``, plus the annotations
``description`` and ``default``. A full validator (``jsonschema``) would add five packages for
keywords no tool uses.
"""

from __future__ import annotations

from typing import Any

SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "items",
        "minItems",
        "maxItems",
        "description",
        "default",
    }
)

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # JSON true/false are not numbers, although Python's bool is an int.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaDefinitionError(ValueError):
    """A tool declared a schema this validator cannot enforce (a programming error)."""


def check_schema(schema: dict[str, Any], where: str = "parameters") -> None:
    """Raise SchemaDefinitionError if ``schema`` uses keywords or types outside the subset."""
    unknown = set(schema) - SUPPORTED
    if unknown:
        raise SchemaDefinitionError(f"{where}: unsupported schema keywords {sorted(unknown)}")
    types = schema.get("type")
    for name in [types] if isinstance(types, str) else types or []:
        if name not in _TYPES:
            raise SchemaDefinitionError(f"{where}: unknown type {name!r}")
    if schema.get("additionalProperties", False) not in (False,):
        raise SchemaDefinitionError(f"{where}: only additionalProperties: false is supported")
    for key, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{where}.{key}")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: Any) -> str:
    """The wrong value as the message shows it, its type named once: "null", "true",
    "integer 5", "string 'x'"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{_type_name(value)} {_show(value)}"


def _type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Every way ``value`` breaks ``schema``, as sentences naming the argument; [] when valid."""
    label = f"argument `{path}`" if path else "the arguments"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_TYPES[t](value) for t in names):
            want = " or ".join(names)
            return [f"{label} must be {_article(want)}, got {_got(value)}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(repr(o) for o in schema["enum"])
        errors.append(f"{label} must be one of {options}, got {_show(value)}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{label} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{label} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(
                f"{label} must not be empty"
                if schema["minLength"] == 1
                else f"{label} must be at least {schema['minLength']} characters long"
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(
                f"{label} must be at most {schema['maxLength']} characters, got {len(value)}"
            )
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{label} needs at least {schema['minItems']} item(s)")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{label} takes at most {schema['maxItems']} items, got {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate(item, schema["items"], f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                errors.append(f"missing required argument `{_join(path, key)}`")
        if schema.get("additionalProperties", True) is False:
            for key in value:
                if key not in props:
                    known = ", ".join(props) or "none"
                    errors.append(
                        f"unknown argument `{_join(path, key)}` (this tool takes: {known})"
                    )
        for key, sub in props.items():
            if key in value:
                errors += validate(value[key], sub, _join(path, key))
    return errors


def drop_null_optionals(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` without the top-level optional keys whose value is ``null``: models send
    ``"lang": null`` for "not given", and the tool then sees the key as absent (its default
    applies). A required key, or one whose schema allows null, keeps its null."""
    required = set(schema.get("required", ()))
    props = schema.get("properties", {})
    return {
        key: value
        for key, value in arguments.items()
        if value is not None or key not in props or key in required or _allows_null(props[key])
    }


def _allows_null(schema: dict[str, Any]) -> bool:
    if "type" not in schema:
        return True  # no declared type: any value, null included
    types = schema["type"]
    return "null" in ([types] if isinstance(types, str) else types)


def with_defaults(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` plus the top-level defaults the schema declares for missing keys."""
    out = dict(arguments)
    for key, sub in schema.get("properties", {}).items():
        if key not in out and "default" in sub:
            out[key] = sub["default"]
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _article(type_names: str) -> str:
    return ("an " if type_names[:1] in "aeiou" else "a ") + type_names
