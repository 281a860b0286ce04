"""Stable names for a savepoint's states: the same logical state gets the same name in every
savepoint of a job whose plan did not change that state.

Flink's operator names carry plan counters (``GroupAggregate[7]``) that move when an unrelated part
of a SQL plan changes, and Flink 1.x ``_metadata`` keeps neither names nor uids. So a state is named
by what survives both: its state name (``accState`` → ``accstate``); a PyFlink process-mode state
by the name its job declares, with or without a descriptor file (``python-state-avg`` → ``avg``).
Only where the same state name occurs in several operators of a savepoint (timers,
``SourceReaderState``) is it qualified with its operator: the uid when there is one, else the
operator's kind, its name without plan counters (``Source: orders[3]`` → ``source_orders``), else
(no uid, no name) its id's first 8 hex digits; a name still shared after that gets the operator
id's first 8 hex digits appended.

Names depend only on the savepoint's operators and state names, never on the order they are
listed in, so the same plan always gives the same names. The Spark catalog and the Delta lake use
these names alike (``catalog_table_names``); an operator's table of all its states is named by its
kind, with the operator id's first 8 hex digits only where that name is already taken. No table
takes a SQL reserved word: such a state name is qualified by its operator, such an operator kind
gets ``_op`` (Flink SQL's ``Join[5]`` → ``join_op``).

``matching_states`` is how every command finds the state a user names: by Flink's name, by the other
spelling of a PyFlink process-mode state (``avg`` / ``python-state-avg``), or by its table name.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from statecat.statemeta.model import (
    PYFLINK_PROCESS_STATE_PREFIX,
    STATE_META_TABLE,
    OperatorMeta,
    StateInfo,
    StateMeta,
    sql_name,
)

# SQL plan counters: ``GroupAggregate[7]``, ``Source: orders[3]``, ``snk[4]: Writer``.
_PLAN_COUNTER = re.compile(r"\[\d+\]")
# Names lake/catalog tables of statecat's own use; a state never takes one of them.
RESERVED_NAMES = frozenset({STATE_META_TABLE, "snapshots", "state_stats"})
# SQL's reserved words (Spark's ANSI list): a table named ``join`` or ``order`` needs quoting in
# Spark's ANSI mode and in other engines, so no table takes one.
SQL_KEYWORDS = frozenset(
    """
    all and any as authorization both case cast check collate column constraint create cross
    current_date current_time current_timestamp current_user distinct else end escape except false
    fetch filter for foreign from full grant group having in inner intersect into is join lateral
    leading left natural not null offset on only or order outer overlaps primary references right
    select session_user some table then time to trailing true union unique unknown user using when
    where with
""".split()
)


def operator_kind(op: OperatorMeta) -> str:
    """A readable, plan-counter-free name of the operator: uid, else name without counters, else id."""
    if op.uid:
        return sql_name(op.uid)
    if op.name:
        return sql_name(_PLAN_COUNTER.sub("", op.name))
    return f"op_{op.id[:8]}"


def stable_state_names(meta: StateMeta) -> dict[tuple[str, str], str]:
    """(operator id, state name) → a stable, SQL-safe table name for every state of the savepoint."""
    by_state: dict[str, list[tuple[OperatorMeta, str]]] = defaultdict(list)
    # The name holds owners of a state name first, then the candidates for a table name.
    owners: list[tuple[OperatorMeta, str]] | list[tuple[str, str, str]]
    for op, state in meta.states():
        by_state[sql_name(_table_stem(op, state.name))].append((op, state.name))
    names: dict[tuple[str, str], str] = {}
    candidates: dict[str, list[tuple[str, str, str]]] = defaultdict(list)  # name -> (op id, state, base)
    for base, owners in by_state.items():
        shared = len(owners) > 1 or base in RESERVED_NAMES or base in SQL_KEYWORDS
        for op, state_name in owners:
            name = f"{operator_kind(op)}__{base}" if shared else base
            candidates[name].append((op.id, state_name, name))
    for name, owners in candidates.items():
        if len(owners) == 1:
            op_id, state_name, _ = owners[0]
            names[(op_id, state_name)] = name
            continue
        # Two operators of the same kind (e.g. two GROUP BYs): the operator id tells them apart.
        for op_id, state_name, base in sorted(owners):
            names[(op_id, state_name)] = f"{base}_{op_id[:8]}"
    return _deduplicated(names)


def _table_stem(op: OperatorMeta, name: str) -> str:
    # A descriptor file renames python-state-avg to avg: its table is avg either way, so adding the
    # file later keeps every table (and lake history). Not where a state avg is beside it.
    if not name.startswith(PYFLINK_PROCESS_STATE_PREFIX):
        return name
    short = other_spelling(name)
    return short if short and all(s.name != short for s in op.states) else name


def other_spelling(name: str) -> str:
    """The other name of a PyFlink process-mode state: Flink stores a state the job declares as ``avg``
    under ``python-state-avg``, and a descriptor file gives it back its declared name."""
    if name.startswith(PYFLINK_PROCESS_STATE_PREFIX):
        return name[len(PYFLINK_PROCESS_STATE_PREFIX) :]
    return PYFLINK_PROCESS_STATE_PREFIX + name


def matching_states(
    name: str,
    states: Iterable[tuple[OperatorMeta, StateInfo]],
    meta: StateMeta | None = None,
) -> list[tuple[OperatorMeta, StateInfo]]:
    """The states among ``states`` that ``name`` names, by the first rule that matches any: Flink's
    state name; the other spelling of a PyFlink process-mode state (``other_spelling``); the state's
    table name in ``meta`` (``stable_state_names``) or its name in any case and punctuation
    (``accstate``). Several matches are for the caller to refuse as ambiguous."""
    states = list(states)
    found = [(op, s) for op, s in states if s.name == name]
    if not found:
        found = [(op, s) for op, s in states if s.name == other_spelling(name)]
    if not found:
        folded = sql_name(name)
        tables = stable_state_names(meta) if meta is not None else {}
        found = [
            (op, s) for op, s in states if sql_name(s.name) == folded or tables.get((op.id, s.name)) == name.lower()
        ]
    return found


@dataclass(frozen=True)
class TableNames:
    """The collision-free table names of a savepoint's database (the same for every savepoint of a plan)."""

    states: dict[tuple[str, str], str]  # (operator id, state name) -> table
    operators: dict[str, str]  # operator id -> the table spanning all its states


def catalog_table_names(meta: StateMeta) -> TableNames:
    """Every table name of a savepoint's catalog database: its states' stable names, and one per operator."""
    states = stable_state_names(meta)
    used = set(RESERVED_NAMES) | set(states.values())
    operators: dict[str, str] = {}
    by_kind: dict[str, list[str]] = defaultdict(list)
    for op in meta.operators:
        if op.states:
            kind = operator_kind(op)
            by_kind[f"{kind}_op" if kind in SQL_KEYWORDS else kind].append(op.id)  # Flink SQL's Join[5]
    for kind in sorted(by_kind):
        owners = by_kind[kind]
        if len(owners) == 1 and kind not in used:
            operators[owners[0]] = kind
            used.add(kind)
    for kind in sorted(by_kind):
        for op_id in sorted(by_kind[kind]):
            if op_id in operators:
                continue
            # Two operators of one kind, or a kind equal to a state's name: the id tells them apart.
            name, suffix = f"{kind}_{op_id[:8]}", 2
            while name in used:
                name = f"{kind}_{op_id[:8]}_{suffix}"
                suffix += 1
            operators[op_id] = name
            used.add(name)
    return TableNames(states, operators)


def _deduplicated(names: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    # Left only by state names that differ in characters SQL names drop ("a-b", "a_b" of one operator).
    used: set[str] = set()
    unique = {}
    for owner in sorted(names):
        name, suffix = names[owner], 2
        while name in used:
            name = f"{names[owner]}_{suffix}"
            suffix += 1
        used.add(name)
        unique[owner] = name
    return unique
