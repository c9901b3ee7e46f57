"""Protobuf schemas written compactly (for the Kubernetes value types and the CEL AST), and the AST subset we walk."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "double": _F.TYPE_DOUBLE,
}


def message_pool(package: str, messages: Mapping[str, str]) -> descriptor_pool.DescriptorPool:
    """A descriptor pool from a compact schema: message name (dotted when nested) → fields `name=number:type`, with
    `[]` for repeated fields, `map<key,value>` for maps and a leading `|` for the members of the message's oneof."""
    file = descriptor_pb2.FileDescriptorProto(name=f"portal/{package}.proto", package=package, syntax="proto3")
    built: dict[str, Any] = {}
    for name in sorted(messages, key=lambda dotted: dotted.count(".")):  # parents first
        parent, _, short = name.rpartition(".")
        message = built[name] = (built[parent].nested_type if parent else file.message_type).add(name=short)
        for spec in messages[name].split():
            in_oneof, spec = spec.startswith("|"), spec.lstrip("|")
            field_name, _, rest = spec.partition("=")
            number, _, kind = rest.partition(":")
            repeated = kind.endswith("[]") or kind.startswith("map<")
            kind = kind.removesuffix("[]")
            if kind.startswith("map<"):
                key, value = kind[4:-1].split(",")
                entry = message.nested_type.add(name="".join(p.title() for p in field_name.split("_")) + "Entry")
                entry.options.map_entry = True
                for entry_field, entry_number, entry_kind in (("key", 1, key), ("value", 2, value)):
                    _add_field(entry, entry_field, entry_number, entry_kind, package, repeated=False)
                kind = f"{name}.{entry.name}"
            field = _add_field(message, field_name, int(number), kind, package, repeated=repeated)
            if in_oneof:
                if not message.oneof_decl:  # Expr → expr_kind, Constant → constant_kind, as in cel-spec
                    message.oneof_decl.add(name=re.sub(r"(?<!^)(?=[A-Z])", "_", short).lower() + "_kind")
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


def _add_field(message: Any, name: str, number: int, kind: str, package: str, *, repeated: bool) -> Any:
    label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind in _SCALARS:
        return message.field.add(name=name, number=number, type=_SCALARS[kind], label=label)
    return message.field.add(
        name=name, number=number, type=_F.TYPE_MESSAGE, label=label, type_name=f".{package}.{kind}"
    )


# A subset of the public cel-spec schema (cel/expr/syntax.proto, checked.proto), enough to walk and rewrite the AST.
# Field numbers are those of the public protos; fields left out are kept as unknown fields when re-serializing.


_SCHEMA_POOL = message_pool(
    "cel.expr",
    {
        "Expr": "id=2:int64 |const_expr=3:Constant |ident_expr=4:Expr.Ident |select_expr=5:Expr.Select "
        "|call_expr=6:Expr.Call |list_expr=7:Expr.CreateList |struct_expr=8:Expr.CreateStruct "
        "|comprehension_expr=9:Expr.Comprehension",
        "Expr.Ident": "name=1:string",
        "Expr.Select": "operand=1:Expr field=2:string test_only=3:bool",
        "Expr.Call": "target=1:Expr function=2:string args=3:Expr[]",
        "Expr.CreateList": "elements=1:Expr[] optional_indices=2:int32[]",
        "Expr.CreateStruct": "message_name=1:string entries=2:Expr.CreateStruct.Entry[]",
        "Expr.CreateStruct.Entry": "id=1:int64 |field_key=2:string |map_key=3:Expr value=4:Expr optional_entry=5:bool",
        "Expr.Comprehension": "iter_var=1:string iter_range=2:Expr accu_var=3:string accu_init=4:Expr "
        "loop_condition=5:Expr loop_step=6:Expr result=7:Expr iter_var2=8:string",
        "Constant": "|bool_value=2:bool |int64_value=3:int64 |uint64_value=4:uint64 |double_value=5:double "
        "|string_value=6:string |bytes_value=7:bytes",
        "SourceInfo": "line_offsets=3:int32[] positions=4:map<int64,int32>",
        "CheckedExpr": "reference_map=2:map<int64,Reference> type_map=3:map<int64,Type> expr=4:Expr "
        "source_info=5:SourceInfo",
        "Reference": "name=1:string overload_id=3:string[]",
        "Type": "message_type=9:string",  # only the member we read; the others stay unknown fields
        "ParsedExpr": "expr=2:Expr source_info=3:SourceInfo",
    },
)
CheckedExpr: Any = message_factory.GetMessageClass(_SCHEMA_POOL.FindMessageTypeByName("cel.expr.CheckedExpr"))
ParsedExpr: Any = message_factory.GetMessageClass(_SCHEMA_POOL.FindMessageTypeByName("cel.expr.ParsedExpr"))


def _children(node: Any) -> list[Any]:
    kind = node.WhichOneof("expr_kind")
    if kind == "select_expr":
        return [node.select_expr.operand]
    if kind == "call_expr":
        call = node.call_expr
        return ([call.target] if call.HasField("target") else []) + list(call.args)
    if kind == "list_expr":
        return list(node.list_expr.elements)
    if kind == "struct_expr":
        entries = node.struct_expr.entries
        return [entry.map_key for entry in entries if entry.HasField("map_key")] + [entry.value for entry in entries]
    if kind == "comprehension_expr":
        loop = node.comprehension_expr
        return [loop.iter_range, loop.accu_init, loop.loop_condition, loop.loop_step, loop.result]
    return []


def ast_nodes(root: Any) -> list[Any]:
    """Every node of an AST, in no particular order."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(_children(node))
    return found


def unpack(serialized: bytes, message_class: Any) -> Any:
    envelope = any_pb2.Any()
    envelope.ParseFromString(serialized)
    message = message_class()
    message.ParseFromString(envelope.value)
    return message
