"""schema.graphql is exported from code and holds every name of the client contract."""

from __future__ import annotations

from pathlib import Path

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    build_schema,
)

from backend.api.schema import export_sdl

ROOT = Path(__file__).parents[1]


def contract_gaps(actual: GraphQLSchema, contract: GraphQLSchema) -> set[str]:
    gaps: set[str] = set()
    for name, ctype in contract.type_map.items():
        if name.startswith("__"):
            continue
        atype = actual.type_map.get(name)
        if atype is None or type(atype) is not type(ctype):
            gaps.add(f"type {name}")
            continue
        if isinstance(ctype, GraphQLObjectType | GraphQLInterfaceType | GraphQLInputObjectType):
            assert isinstance(atype, GraphQLObjectType | GraphQLInterfaceType | GraphQLInputObjectType)
            for fname, cfield in ctype.fields.items():
                afield = atype.fields.get(fname)
                if afield is None or str(afield.type) != str(cfield.type):
                    gaps.add(f"{name}.{fname}")
                    continue
                for arg, carg in getattr(cfield, "args", {}).items():
                    aarg = getattr(afield, "args", {}).get(arg)
                    if aarg is None or str(aarg.type) != str(carg.type):
                        gaps.add(f"{name}.{fname}({arg})")
        elif isinstance(ctype, GraphQLEnumType):
            assert isinstance(atype, GraphQLEnumType)
            gaps |= {f"{name}.{v}" for v in ctype.values if v not in atype.values}
        elif isinstance(ctype, GraphQLUnionType):
            assert isinstance(atype, GraphQLUnionType)
            have = {t.name for t in atype.types}
            gaps |= {f"{name} | {t.name}" for t in ctype.types if t.name not in have}
    return gaps


# What the contract names that the code does not serve yet; each lifecycle/API change removes its lines.
KNOWN_GAPS: set[str] = set()


def test_schema_file_matches_the_code() -> None:
    assert (ROOT / "schema.graphql").read_text() == export_sdl(), "run `make schema`"


def test_schema_holds_the_client_contract() -> None:
    contract = build_schema((ROOT / "tests" / "fixtures" / "api-contract.graphql").read_text())
    actual = build_schema((ROOT / "schema.graphql").read_text())
    assert contract_gaps(actual, contract) == KNOWN_GAPS
