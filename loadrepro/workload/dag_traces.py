"""AIPerf's `dag_jsonl` (`trace_format = "dag"`): one conversation per line (`session_id`, `turns`), each turn's
`messages` appended to its conversation's history after the engine's own answer to the turn before, and branches:

- `forks`: a child that starts once the turn answered, from the parent's history and that live answer (a bare id ends
  the parent there, so it is only allowed on its last turn; `{"child", "background": true}` lets the parent go on);
- `spawns`: a child that starts from nothing but its own messages once the turn answered; the parent's turn `join_at`
  (by default the next) waits for it to end;
- `pre_session_spawns`: children started with the conversation, waited for by no one.

A conversation no other names is a root. A turn's `max_tokens`, `tools` and `extra` (merged into the body) are sent;
its `delay` (ms) is a wait after the answer before it. Every turn after a conversation's first, and a fork's first,
is sent with the engine's own answers in its history, so its prompt length is not checked against the plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadrepro.errors import TraceError
from loadrepro.workload.trace_rows import Message, Skipped, TraceRow, fail, jsonl, length, number

DEFAULT_MAX_TOKENS = 128  # a turn that sets none
_SENT = ("messages", "max_tokens", "tools", "extra", "forks", "spawns", "delay", "model")
ANSWER = {"role": "assistant", "content": ""}  # the engine's answer's place in a planned history (sent live)


@dataclass(slots=True)
class _Branches:
    """Who starts whom, read from every line before any row is made."""

    forks: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # (parent, turn) -> children
    spawns: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    joins: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # (parent, turn joining) -> children
    pre: dict[str, list[str]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)  # every session some other names
    forked_by: dict[str, str] = field(default_factory=dict)


def read_dag(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """Every root's tree, depth first: a conversation's turns, each followed by the branches it starts."""
    lines: dict[str, tuple[str, dict[str, Any]]] = {}
    for where, data in jsonl(path):
        sid = data.get("session_id")
        if not isinstance(sid, str) or not sid:
            raise fail(where, "session_id", "missing or not a string")
        if sid in lines:
            raise fail(where, "session_id", f"{sid!r} is also {lines[sid][0]}")
        if data.get("orchestrator") or data.get("context_mode", "deltas_without_responses") != \
                "deltas_without_responses":
            raise fail(where, "orchestrator" if data.get("orchestrator") else "context_mode",
                       "orchestrator conversations and other context modes are not replayed")
        turns = data.get("turns")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
            raise fail(where, "turns", "missing, empty or not a list of objects")
        lines[sid] = (where, data)
    branches = _branches(lines)
    roots = [sid for sid in lines if sid not in branches.named]
    if not roots:
        raise TraceError(f"{path}: no root conversation: every session is some other's branch (a cycle)")
    reached: set[str] = set()
    for sid in roots:
        yield from _Tree(lines, branches, sid, reached).rows(sid, sid, (), None, False, ())
    if unreached := [sid for sid in lines if sid not in reached]:
        raise TraceError(f"{lines[unreached[0]][0]}: session {unreached[0]!r} is reached from no root: its branches "
                         "form a cycle")


def _branches(lines: dict[str, tuple[str, dict[str, Any]]]) -> _Branches:
    b = _Branches()
    for sid, (where, data) in lines.items():
        turns = data["turns"]
        for k, turn in enumerate(turns):
            at = f"{where}: turns.{k}"
            for fork in turn.get("forks") or []:
                child, background = (fork, False) if isinstance(fork, str) else (fork.get("child"), bool(
                    fork.get("background"))) if isinstance(fork, dict) else (None, False)
                if not background and k != len(turns) - 1:
                    raise fail(at, "forks", f"{child!r}: a bare fork ends its conversation, so it must be on its "
                               "last turn (or {\"child\": ..., \"background\": true})")
                known = _known(lines, at, "forks", child)
                if known in b.forked_by:
                    raise fail(at, "forks", f"{known!r} is already forked by {b.forked_by[known]!r}")
                b.forked_by[known] = sid
                b.forks.setdefault((sid, k), []).append(known)
            for spawn in turn.get("spawns") or []:
                # A bare id is joined by the next turn; on the last turn, by none (nothing follows to wait).
                children, join_at = ([spawn], k + 1 if k + 1 < len(turns) else None) if isinstance(spawn, str) else (
                    spawn.get("children") or [], spawn.get("join_at", k + 1)) if isinstance(spawn, dict) else ([], 0)
                if join_at is not None and (not isinstance(join_at, int) or not k < join_at < len(turns)):
                    raise fail(at, "spawns", f"join_at {join_at!r}: a later turn of this conversation (after {k}, "
                               f"before {len(turns)})")
                for child in children:
                    b.spawns.setdefault((sid, k), []).append(_known(lines, at, "spawns", child))
                    if join_at is not None:
                        b.joins.setdefault((sid, join_at), []).append(child)
        for child in data.get("pre_session_spawns") or []:
            b.pre.setdefault(sid, []).append(_known(lines, f"{where}", "pre_session_spawns", child))
    b.named = {c for children in (*b.forks.values(), *b.spawns.values(), *b.pre.values()) for c in children}
    return b


def _known(lines: dict[str, tuple[str, dict[str, Any]]], where: str, key: str, child: Any) -> str:
    if not isinstance(child, str) or child not in lines:
        raise fail(where, key, f"{child!r} is not the session_id of a line of the file")
    return child


class _Tree:
    """One root's conversations as rows; a spawned conversation is one session per time it is spawned."""

    def __init__(self, lines: dict[str, tuple[str, dict[str, Any]]], branches: _Branches, root: str,
                 reached: set[str]) -> None:
        self.lines, self.b, self.root, self.reached = lines, branches, root, reached

    def rows(self, sid: str, session: str, inherited: tuple[Message, ...], spawned_by: tuple[str, int] | None,
             forked: bool, path: tuple[str, ...]) -> Iterator[TraceRow]:
        """`path`: the conversations that led here, so that a branch back to one of them is a cycle, not a loop."""
        if sid in path:
            raise TraceError(f"{self.lines[sid][0]}: cycle: {' -> '.join((*path, sid))}")
        self.reached.add(sid)
        path = (*path, sid)
        where, data = self.lines[sid]
        for child in self.b.pre.get(sid, []):
            yield from self.rows(child, f"{session}>{child}", (), (session, 0), False, path)
        history = list(inherited)
        for k, turn in enumerate(data["turns"]):
            at = f"{where}: turns.{k}"
            messages = _messages(turn, at, seeding=k == 0 and not forked)
            live = k > 0 or forked
            history += [ANSWER, *messages] if live else messages
            delay = number(turn, "delay", at, optional=True) or 0.0
            max_tokens = length(turn, "max_tokens", at) if "max_tokens" in turn else DEFAULT_MAX_TOKENS
            joined = tuple(f"{session}>{c}" for c in self.b.joins.get((sid, k), []))
            yield TraceRow(at, None, 0, max_tokens, session=session, delay_s=delay / 1000, messages=tuple(history),
                           joins=joined, tree=None if session == self.root else self.root,
                           spawned_by=spawned_by if k == 0 else None, tail=tuple(messages) if live else None,
                           forked=forked and k == 0, extra=_extra(turn, at))
            for child in self.b.forks.get((sid, k), []):
                yield from self.rows(child, f"{session}>{child}", tuple(history), (session, k + 1), True, path)
            for child in self.b.spawns.get((sid, k), []):
                yield from self.rows(child, f"{session}>{child}", (), (session, k + 1), False, path)


def _messages(turn: dict[str, Any], where: str, seeding: bool) -> list[Message]:
    messages = turn.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m
                                                                 for m in messages):
        raise fail(where, "messages", "missing, empty, or a message without a role")
    if not seeding and any(m["role"] == "system" for m in messages):
        raise fail(where, "messages", "a system message is only allowed on a conversation's first turn (not a "
                   "fork's, which goes on from its parent's history)")
    return [dict(m) for m in messages]


def _extra(turn: dict[str, Any], where: str) -> dict[str, Any] | None:
    """What the turn adds to the request body: its tools and its `extra`, as AIPerf merges them."""
    unknown = sorted(set(turn) - set(_SENT))
    if unknown:
        raise fail(where, unknown[0], "not a dag_jsonl turn field (extra holds the body's own)")
    extra = turn.get("extra") or {}
    if not isinstance(extra, dict):
        raise fail(where, "extra", "not an object")
    body = {k: v for k, v in extra.items() if k not in ("messages", "model", "stream", "stream_options")}
    if turn.get("tools"):
        body["tools"] = turn["tools"]
    return body or None
