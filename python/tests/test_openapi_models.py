"""The hand-written models and errors against docs/openapi.json, the gateway's OpenAPI document (generated from the zod
schemas in src/, and kept equal to them by the TypeScript tests). Reads the file only: no server, no fixture.

A model matches a schema when it has the same wire names (aliases), the same required fields (a field with a default
is optional), admits None where the schema is nullable, and, where the schema names the values (an enum), the model's
Literal names the same ones. A model field may stay a plain ``str`` against an enum only where OPEN_ENUMS says why.

An answer the document does not describe (a bare ``type: object``) is skipped, saying so: its model is compared as soon
as the document describes it.
"""

from __future__ import annotations

import json
import keyword
import re
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

import pytest
from pydantic import BaseModel

from durable_sessions import errors, inputs, models
from durable_sessions._wire import control
from durable_sessions.errors import ERROR_CLASSES, DurableSessionsError
from durable_sessions.models import Problem

DOCUMENT_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
DOCUMENT: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))
Schema = dict[str, Any]

#: What the client makes of each answer the document describes: the model it parses it into, or why it has none.
ANSWERS: dict[str, Union[type[BaseModel], str]] = {
    "GET /healthz": "a probe for load balancers, not a client call",
    "GET /readyz": "a probe for load balancers, not a client call",
    "POST /v1/sessions": "start() returns a Session; the status answered is its last_status, as status() parses it",
    "GET /v1/sessions": models.SessionPage,
    "GET /v1/sessions/{id}": models.SessionStatus,
    "GET /v1/sessions/{id}/checkpoints": models.TimelinePage,
    "GET /v1/sessions/{id}/checkpoints/{index}": models.TimelineEntry,
    "GET /v1/sessions/{id}/events": models.Event,
    "POST /v1/sessions/{id}/touch": "touch() returns None: the gateway answers {}",
    "POST /v1/sessions/{id}/checkpoint": models.CheckpointRef,
    "POST /v1/sessions/{id}/pause": models.CheckpointRef,
    "POST /v1/sessions/{id}/resume": models.ResumeResult,
    "POST /v1/sessions/{id}/stop": models.StopResult,
    "POST /v1/sessions/{id}/verify": models.VerificationResults,
    "POST /v1/sessions/{id}/rewind": models.RewindResult,
    "POST /v1/sessions/{id}/fork": models.ForkResult,
    "POST /v1/sessions/{id}/branch": models.ForkResult,
    "POST /v1/sessions/{id}/configure": models.SessionStatus,
    "POST /v1/sessions/{id}/append": models.AppendResult,
    "POST /v1/sessions/{id}/regenerate": models.ForkResult,
    "POST /v1/sessions/{id}/export": "export_session() streams the archive's bytes into a file: no JSON, no model",
    "POST /v1/imports": models.ImportResult,
}

#: The input model the client sends each request body as.
REQUESTS: dict[str, type[inputs.InputModel]] = {
    "POST /v1/sessions": inputs.StartSessionInput,
    "POST /v1/sessions/{id}/checkpoint": inputs.CheckpointInput,
    "POST /v1/sessions/{id}/pause": inputs.PauseInput,
    "POST /v1/sessions/{id}/resume": inputs.ResumeInput,
    "POST /v1/sessions/{id}/stop": inputs.StopInput,
    "POST /v1/sessions/{id}/verify": inputs.VerifyInput,
    "POST /v1/sessions/{id}/rewind": inputs.RewindInput,
    "POST /v1/sessions/{id}/fork": inputs.ForkInput,
    "POST /v1/sessions/{id}/branch": inputs.BranchInput,
    "POST /v1/sessions/{id}/configure": inputs.ConfigureInput,
    "POST /v1/sessions/{id}/append": inputs.AppendInput,
    "POST /v1/sessions/{id}/regenerate": inputs.RegenerateInput,
    "POST /v1/sessions/{id}/export": inputs.ExportSessionInput,
}

#: Model fields kept a plain str where the document names the values, and why.
OPEN_ENUMS: dict[tuple[str, str], str] = {
    ("Event", "event"): "a newer gateway may stream other events: the client passes them on, it does not refuse them",
    ("Problem", "code"): "a newer gateway may answer a code this client does not know: it raises DurableSessionsError",
    ("SessionStatus", "phase"): "a newer session may be in a phase this client does not know (wait_for compares names)",
    ("PhaseChange", "phase"): "a newer session may be in a phase this client does not know, as SessionStatus.phase",
    ("SessionStatus", "runtime_kind"): "a newer worker may run other runtimes",
    ("RuntimeInstance", "kind"): "a newer worker may run other runtimes",
    ("CheckpointRef", "trigger"): "triggers are added as workers learn them (CheckpointTrigger)",
    ("CheckpointRef", "encryption"): "a newer store may protect checkpoints otherwise",
    ("VerificationResult", "status"): "a newer store may find other things wrong with a checkpoint",
    ("TimelineEntry", "kind"): "a newer session records other kinds of entries: the client passes them on",
    ("TimelineEntry", "cause"): "a newer session may restore or verify for other reasons",
    ("TimelineEntry", "durability"): "a newer store may know other states of a checkpoint",
    ("TimelineEntry", "status"): "a newer store may find other things wrong with a checkpoint",
    ("TimelineEntry", "action"): "a newer session may have other policies",
}


def operations() -> dict[str, Schema]:
    return {f"{method.upper()} {path}": op for path, ops in DOCUMENT["paths"].items() for method, op in ops.items()}


def resolve(schema: Schema) -> Schema:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = DOCUMENT["components"]["schemas"][name]
    return schema


def success(op: Schema) -> Schema:
    """The schema of an operation's 2xx answer (JSON, or one Server-Sent Event)."""
    [(status, answer)] = [(s, a) for s, a in op["responses"].items() if s.startswith("2")]
    [(_, content)] = answer["content"].items()
    return resolve(content["schema"])


def variants(schema: Schema) -> list[Schema]:
    """A union's object variants (a discriminated union, or an object that may be null); the object itself else."""
    schema = resolve(schema)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return [v for s in schema[key] for v in variants(s) if v.get("type") != "null"]
    return [schema]


def nullable(schema: Schema) -> bool:
    schema = resolve(schema)
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(nullable(s) for key in ("oneOf", "anyOf") for s in schema.get(key, []))


def enum_of(schema: Schema) -> Optional[set[Any]]:
    """The values a schema allows when it names them (enum or const, across a union's members)."""
    schema = resolve(schema)
    if "enum" in schema:
        return {v for v in schema["enum"] if v is not None}
    if "const" in schema:
        return {schema["const"]}
    members = [resolve(s) for key in ("oneOf", "anyOf") for s in schema.get(key, [])]
    named = [enum_of(s) for s in members if s.get("type") != "null"]
    if named and all(n is not None for n in named):
        return set().union(*typing.cast(list[set[Any]], named))
    return None


def described(schema: Schema) -> bool:
    """Whether the document says what the object holds (not a bare `type: object` that admits anything)."""
    return any(v.get("properties") for v in variants(schema))


def unwrap(annotation: Any) -> tuple[Any, bool, bool]:
    """``(inner type, admits None, is a list)`` of a field's annotation."""
    admits_none = False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Union and type(None) in args:
        admits_none = True
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else Union[tuple(rest)]
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], admits_none, True
    return annotation, admits_none, False


def mismatches(model: type[BaseModel], schema: Schema, where: str) -> list[str]:
    """Every way ``model`` disagrees with ``schema`` (an object, or a union of objects), nested models included."""
    shapes = variants(schema)
    properties: dict[str, list[Schema]] = {}
    for shape in shapes:
        for name, prop in shape.get("properties", {}).items():
            properties.setdefault(name, []).append(prop)
    # A union's field is required when every variant requires it.
    required = set.intersection(*(set(s.get("required", [])) for s in shapes))
    fields = {field.alias or name: (name, field) for name, field in model.model_fields.items()}
    out = [
        f"{where}: {name} is in the document, not in {model.__name__}" for name in sorted(set(properties) - set(fields))
    ]
    out += [
        f"{where}: {model.__name__}.{fields[n][0]} ({n}) is not in the document"
        for n in sorted(set(fields) - set(properties))
    ]
    for wire in sorted(set(fields) & set(properties)):
        name, field = fields[wire]
        at = f"{where}.{wire}"
        if (wire in required) != field.is_required():
            say = "required" if wire in required else "optional"
            out.append(f"{at}: {say} in the document, {'required' if field.is_required() else 'optional'} in the model")
        inner, admits_none, is_list = unwrap(field.annotation)
        props = properties[wire]
        if any(nullable(p) for p in props) and not admits_none and inner is not Any:
            out.append(f"{at}: may be null in the document; {model.__name__}.{name} does not admit None")
        items = [resolve(p).get("items", {}) for p in props] if is_list else props
        values = set().union(*(enum_of(p) or set() for p in items)) if all(enum_of(p) for p in items) else None
        if values is not None:
            if typing.get_origin(inner) is Literal:
                if set(typing.get_args(inner)) != values:
                    out.append(f"{at}: the document's values {sorted(values)}, the model's {typing.get_args(inner)}")
            elif (model.__name__, name) not in OPEN_ENUMS:
                out.append(f"{at}: the document names its values {sorted(values)}; the model takes any {inner}")
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            nested = [i for i in items if described(i)]
            out += [m for i in nested for m in mismatches(inner, i, at)]
    return out


def answer_cases() -> list[Any]:
    return [pytest.param(op, model, id=op) for op, model in ANSWERS.items() if isinstance(model, type)]


def test_every_answer_is_accounted_for() -> None:
    assert set(ANSWERS) == set(operations()), "ANSWERS names a model (or why none) for each operation"


@pytest.mark.parametrize(("op", "model"), answer_cases())
def test_the_answer_model_matches_the_document(op: str, model: type[BaseModel]) -> None:
    schema = success(operations()[op])
    if not described(schema):
        pytest.skip(f"docs/openapi.json does not say what the answer of {op} holds ({json.dumps(schema)})")
    assert mismatches(model, schema, op) == []


def problem_schemas() -> list[Schema]:
    return [
        resolve(content["schema"])
        for op in operations().values()
        for status, answer in op["responses"].items()
        if not status.startswith("2")
        for kind, content in answer.get("content", {}).items()
        if kind == "application/problem+json"
    ]


def test_every_error_answer_is_a_problem_document_the_model_matches() -> None:
    schemas = problem_schemas()
    assert schemas, "the document describes its error answers"
    for schema in {json.dumps(s, sort_keys=True): s for s in schemas}.values():
        assert mismatches(Problem, schema, "Problem") == []


def test_the_clients_own_problems_are_documents_of_that_shape() -> None:
    own = Problem.make(503, "Unavailable", "the gateway cannot be reached", "s-1").wire()
    schema = problem_schemas()[0]
    assert set(schema["required"]) <= set(own) <= set(schema["properties"])


def documented_codes() -> tuple[Optional[set[str]], set[str]]:
    """The error codes the document lists (Problem.code's enum, if it has one), and those its error answers name."""
    codes = [enum_of(s["properties"]["code"]) for s in problem_schemas()]
    listed = set().union(*(c for c in codes if c)) if any(codes) else None
    named = {
        code
        for op in operations().values()
        for status, answer in op["responses"].items()
        if not status.startswith("2")
        for code in re.findall(r"`([A-Z][A-Za-z]+)`", answer.get("description", ""))
    }
    return listed, named


def test_each_error_code_the_document_names_has_its_class() -> None:
    listed, named = documented_codes()
    for code in (listed or set()) | named:
        assert code in ERROR_CLASSES and ERROR_CLASSES[code] is not DurableSessionsError, code


def test_the_error_classes_are_the_documents_codes() -> None:
    listed, _ = documented_codes()
    if listed is None:
        pytest.skip("docs/openapi.json gives Problem.code no enum: which codes exist is not in the document")
    assert listed <= set(ERROR_CLASSES), "a code of the document has no class"
    ahead = set(ERROR_CLASSES) - listed
    assert not ahead, f"classes of codes the document does not list: {ahead}"


def test_one_class_per_code_all_exported() -> None:
    classes = DurableSessionsError.__subclasses__()
    assert sorted(c.code for c in classes) == sorted(ERROR_CLASSES), "two classes share a code"
    assert errors.__all__ == [
        "DurableSessionsError",
        "ERROR_CLASSES",
        "error_from_problem",
        *(c.__name__ for c in classes),
    ]


# The other way: every field of every request body the document describes is reachable from the snake_case keyword
# the README promises, and the caller's own data (env, files, message contents) goes over the wire exactly as given.

#: Keys of the caller's own maps (env, files): never converted.
USER_KEYS = {"MY_VAR": "1", "src/my_file.txt": "x"}


def snake(name: str) -> str:
    out = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
    return f"{out}_" if keyword.iskeyword(out) else out


def samples(schema: Schema) -> list[tuple[Any, Any]]:
    """``(what a Python caller passes, what must go over the wire)`` pairs for a schema: one per union variant."""
    schema = resolve(schema)
    if "oneOf" in schema or "anyOf" in schema:
        members = [s for key in ("oneOf", "anyOf") for s in schema.get(key, [])]
        return [pair for member in members for pair in samples(member)]
    if schema.get("type") == "object" and "properties" in schema:
        given: dict[str, Any] = {}
        wire: dict[str, Any] = {}
        # Each field's first sample; a union field's other variants each make one more sample of the whole object.
        others: list[tuple[str, Any, Any]] = []
        for name, prop in schema["properties"].items():
            [first, *rest] = samples(prop)
            given[snake(name)], wire[name] = first
            others += [(name, g, w) for g, w in rest]
        return [(given, wire), *(({**given, snake(n): g}, {**wire, n: w}) for n, g, w in others)]
    if schema.get("type") == "object":
        return [(dict(USER_KEYS), dict(USER_KEYS))]
    if schema.get("type") == "array":
        return [([g], [w]) for g, w in samples(schema.get("items", {}))[:1]]
    value = schema.get("enum", [{"integer": 7, "number": 7, "boolean": True}.get(schema.get("type", ""), "x")])[0]
    return [(value, value)]


def request_body(op: str) -> Optional[Schema]:
    body = operations()[op].get("requestBody", {}).get("content", {}).get("application/json")
    return None if body is None else resolve(body["schema"])


def test_every_request_body_has_its_input_model() -> None:
    with_body = {op for op in operations() if request_body(op) is not None and op in ANSWERS}
    assert with_body - {"POST /v1/sessions/{id}/touch"} == set(REQUESTS)


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_the_input_model_has_the_documents_fields(op: str) -> None:
    body = request_body(op)
    assert body is not None
    names = set().union(*(set(v.get("properties", {})) for v in variants(body)))
    model = REQUESTS[op]
    aliases = {field.alias or name for name, field in model.model_fields.items()}
    assert aliases == names


def request_cases() -> list[Any]:
    cases = []
    for op in sorted(REQUESTS):
        body = request_body(op)
        assert body is not None
        for i, (given, wire) in enumerate(samples(body)):
            cases.append(pytest.param(op, given, wire, id=f"{op} #{i + 1}"))
    return cases


@pytest.mark.parametrize(("op", "given", "wire"), request_cases())
def test_every_request_field_reaches_the_wire_by_its_snake_case_name(op: str, given: Any, wire: Any) -> None:
    body = REQUESTS[op].model_validate(given)
    assert body.wire() == wire
    if op != "POST /v1/sessions":
        req = control("s-1", op.rsplit("/", 1)[1], body)
        # A control's key travels as the Idempotency-Key header (the body's would be the same key).
        if "idempotencyKey" in wire:
            assert req.headers == {"idempotency-key": wire.pop("idempotencyKey")}
        assert req.json == wire
