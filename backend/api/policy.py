"""Everything the API does around an operation, as one Strawberry extension.

Strawberry runs every hook of every extension as a context manager, on every operation (and its
extensions are made anew for each one). Eight small extensions (error policy, token limit, two rule
sets, document and validation caches, text hygiene, operation metrics) cost about as much CPU per
operation as an ask's storage work. This one extension does the same, in the same order, and all
of it in its one `on_operation` hook (each hook costs a context manager of its own per operation):

- **limits**: the parser's token limit and the extra validation rules (query depth, document
  size) are set; after the operation, errors are given their code or masked (`ErrorPolicy`);
- **parse**: documents come from a bounded cache (128 texts); a text that does not parse is left to
  Strawberry's own parse step, which reports the syntax error as a pre-execution error with its code;
- **validate**: validation results come from a bounded cache keyed by schema, document text and
  rules (128 entries; the text, not the parsed document, whose hash walks its whole tree); then text
  no store can keep (`hygiene`) replaces them with its own errors, so the operation executes
  nothing;
- **latency**: of a query or mutation that executed, for `/metrics`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from graphql import ASTValidationRule, DocumentNode, GraphQLError, GraphQLSchema, ValidationRule
from strawberry.extensions import QueryDepthLimiter

from backend.api import strawberry_adapter
from backend.api.errors import ErrorPolicy
from backend.api.hygiene import text_problems
from backend.api.limits import max_query_bytes
from backend.api.observe import record_operation
from backend.lru import LRU

# Documents, and validation results, kept: as many as Strawberry's own caches keep by default.
_CACHED = 128
_parse = strawberry_adapter.parse_cache(_CACHED)
# Strawberry's validation, or None: every document is then left to Strawberry's own validation step.
_validate_document = strawberry_adapter.document_validator()


Rules = tuple[type[ASTValidationRule], ...]


class _Validations:
    """Validation results by (schema, document text, rules), the least recently used out first. A text always
    parses to the same document (the parser's options are fixed per schema), so the text stands for
    it; the schema is held by the key itself, so its identity cannot be reused while cached."""

    def __init__(self, maxsize: int, validate: strawberry_adapter.Validate) -> None:
        self._validate = validate
        self._found: LRU[tuple[GraphQLSchema, str, Rules], list[GraphQLError]] = LRU(maxsize)

    def __call__(
        self,
        schema: GraphQLSchema,
        query: str,
        document: DocumentNode,
        rules: tuple[type[ASTValidationRule], ...],
    ) -> list[GraphQLError]:
        key = (schema, query, rules)
        found = self._found.get(key)
        if found is None:
            found = self._validate(schema, document, rules)
            self._found.put(key, found)
        return found


_validate = _Validations(_CACHED, _validate_document) if _validate_document is not None else None
# (Strawberry's rules, ours) -> both; a handful of entries (one per schema's limits).
_RULES: dict[tuple[Rules, Rules], Rules] = {}


class OperationPolicy(ErrorPolicy):
    """Made by `operation_policy`, which sets the limits."""

    max_tokens: int
    rules: tuple[type[ValidationRule], ...]

    def on_operation(self) -> Iterator[None]:
        # Everything runs in this one hook: Strawberry wraps every hook of an extension in a context
        # manager of its own, made anew for each operation, which cost more than the work inside.
        ctx = self.execution_context
        started = time.perf_counter()
        ctx.parse_options["max_tokens"] = self.max_tokens
        # One tuple of rules for every operation (an operation holds it for as long as it runs).
        base = ctx.validation_rules
        rules = _RULES.get((base, self.rules))
        if rules is None:
            rules = _RULES.setdefault((base, self.rules), base + self.rules)
        ctx.validation_rules = rules
        query = ctx.query
        if query and ctx.graphql_document is None:
            # Parsed here (cached), so Strawberry's parse step finds the document; a text that does
            # not parse is left to that step, which reports the syntax error.
            with contextlib.suppress(GraphQLError):
                ctx.graphql_document = _parse(query, **ctx.parse_options)
        document = ctx.graphql_document
        if document is not None and query:
            if _validate is not None:
                # Validated here (cached): Strawberry's validation step then keeps these results. It
                # checks the operation type first, which a validation result does not change.
                ctx.pre_execution_errors = _validate(
                    strawberry_adapter.core_schema(ctx.schema), query, document, rules
                )
            problems = text_problems(ctx)
            if problems:
                ctx.pre_execution_errors = problems  # the operation ends with these, executing nothing
        yield from super().on_operation()
        if document is not None and not ctx.pre_execution_errors:
            record_operation(ctx, time.perf_counter() - started)


def operation_policy(*, max_depth: int, max_tokens: int, max_bytes: int) -> type[OperationPolicy]:
    """The extension class for a schema: its rule classes are made once, so the validation cache
    (keyed by document and rules) hits for every repeated document."""
    # The depth rule of Strawberry's documented `QueryDepthLimiter` (the rules it adds, as any
    # `AddValidationRules`), run here with the others rather than as an extension of its own.
    rules = (*QueryDepthLimiter(max_depth=max_depth).validation_rules, max_query_bytes(max_bytes))
    return type("OperationPolicy", (OperationPolicy,), {"max_tokens": max_tokens, "rules": rules})
