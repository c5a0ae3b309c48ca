"""Every query parameter and form field of every dashboard page, checked in one place.

A value a page cannot use (a NUL, which PostgreSQL's text refuses; a lone surrogate; an instant
out of range; a cursor that is not one) is the request's fault: :func:`check_query` raises a
ConfigError naming the parameter, which the dashboard answers with 400, before anything reaches
the database (where it would have become a 5xx). A parameter no page reads is ignored, as web
pages do (tracking parameters, a stray ``?utm_source``).

Example::

    params = check_query({"state": ["failed"], "since": ["2026-05-01T12:00"]})
    params.states, params.since      # [JobState.FAILED], datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pgqueue import config
from pgqueue.errors import ConfigError
from pgqueue.job import JobState

__all__ = [
    "MAX_SEARCH",
    "WINDOWS",
    "WITHIN",
    "FormFields",
    "QueryParams",
    "check_form",
    "check_ids",
    "check_job_id",
    "check_query",
    "read_values",
]

# Longer than any error type or message the dashboard makes; bounds what a request can send on.
_MAX_TEXT = 1000


@dataclass(frozen=True, slots=True)
class QueryParams:
    """The checked query parameters of a request (each page reads the ones it uses).

    Example::

        check_query({"queue": ["emails"]}).queue    # "emails"
    """

    queue: str | None = None
    task: str | None = None
    id: str | None = None
    states: list[JobState] = field(default_factory=list)
    state: JobState | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: tuple[datetime, str] | None = None
    cursor_text: str | None = None
    action: str | None = None
    type: str | None = None
    message: str | None = None
    fragment: bool = False
    #: The worker (``locked_by``) whose jobs to list.
    worker: str | None = None
    #: Text to find in the arguments (a substring of the stored JSON).
    q: str | None = None
    #: Changed within this span before now (``15m``, ``1h``, ``24h``, ``7d``).
    within: timedelta | None = None
    #: A bulk action's scope: the ``selected`` ids, or ``all`` jobs matching the filters.
    scope: str | None = None
    #: A workflow's id.
    workflow: str | None = None
    #: The Tasks page's window (``1h`` or ``1d``).
    window: timedelta | None = None


@dataclass(frozen=True, slots=True)
class FormFields:
    """The checked fields of a group action's form: the group's state and error type."""

    state: JobState | None = None
    type: str | None = None


def check_query(query: Mapping[str, list[str]]) -> QueryParams:
    """The query parameters every page may read, checked; ConfigError names the bad one."""
    values: dict[str, Any] = {}
    for name, check in _QUERY.items():
        given = _given(query, name)
        if given is not None:
            values[name] = check(name, given)
    values["states"] = [_state("state", v) for v in _all(query, "state")]
    if "cursor" in values:
        values["cursor_text"] = _given(query, "cursor")
    values["fragment"] = _given(query, "fragment") is not None
    return QueryParams(**values)


def check_form(form: Mapping[str, list[str]]) -> FormFields:
    """A group action's form fields, checked like query parameters."""
    state = _given(form, "state")
    kind = _given(form, "type")
    return FormFields(
        state=_state("state", state) if state else None,
        type=_text("type", kind) if kind else None,
    )


def check_job_id(value: str) -> str:
    """A job id from a page's path or query: text both databases can hold (no NUL, no lone
    surrogate), of at most the length a job id may have."""
    return _text("job id", value, limit=config.MAX_ID_BYTES)


def check_ids(form: Mapping[str, list[str]], limit: int) -> list[str]:
    """The job ids a bulk action's form selected (``id``, repeated), each checked, at most
    ``limit`` of them (a page's worth)."""
    values = form.get("id", [])
    if isinstance(values, str):
        values = [values]
    if len(values) > limit:
        raise ConfigError(f"id: {len(values)} jobs selected; at most {limit} at once")
    return list(dict.fromkeys(check_job_id(v) for v in values if isinstance(v, str) and v))


def read_values(query: Mapping[str, list[str]], name: str) -> list[str]:
    """The values of ``name`` that :func:`check_query` reads and checks: every ``state``, the
    first of any other (stripped, empty ones skipped).

    Example::

        read_values({"queue": ["a", "b"], "state": ["failed", "queued"]}, "queue")   # ["a"]
    """
    values = _all(query, name)
    return values if name == "state" else values[:1]


def _given(query: Mapping[str, list[str]], name: str) -> str | None:
    # The first non-empty value, stripped (what a form's text field sends with a stray space).
    values = _all(query, name)
    return values[0] if values else None


def _all(query: Mapping[str, list[str]], name: str) -> list[str]:
    values = query.get(name, [])
    if isinstance(values, str):  # a caller of handle() passing one value, not a list
        values = [values]
    out = []
    for value in values:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected text, got {type(value).__name__}")
        if value.strip():
            out.append(value.strip())
    return out


def _text(name: str, value: str, limit: int = _MAX_TEXT) -> str:
    value = config.check_text(name, value)
    if len(value) > limit:
        raise ConfigError(f"{name} is {len(value)} characters long; the limit is {limit}")
    return value


def _name(name: str, value: str) -> str:
    return config.check_name(name, value)


def _state(name: str, value: str) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        valid = ", ".join(map(str, JobState))
        raise ConfigError(
            f"{name}: unknown job state {value[:100]!r}; expected one of: {valid}"
        ) from None


def _time(name: str, value: str) -> datetime:
    example = "a time like 2026-05-01T12:00 (UTC) or 2026-05-01T14:00+02:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{name}: expected {example}, got {value[:100]!r}") from None
    try:
        return _utc(parsed)
    except (OverflowError, ValueError):
        # 9999-12-31T23:59:59-23:59 is a valid ISO time whose UTC instant is past year 9999.
        raise ConfigError(f"{name}: {value[:100]!r} is out of range in UTC") from None


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _cursor(name: str, value: str) -> tuple[datetime, str]:
    moment, sep, job_id = value.partition("~")
    problem = "not a cursor of the jobs list (follow the list's Next link)"
    if not sep or not job_id:
        raise ConfigError(f"{name}: {problem}")
    try:
        parsed = datetime.fromisoformat(moment)
        if parsed.tzinfo is None:
            raise ValueError
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ConfigError(f"{name}: {problem}") from None
    return parsed, _text(name, job_id, limit=config.MAX_ID_BYTES)


#: The spans the jobs list's "changed within" choice offers.
WITHIN: dict[str, timedelta] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}
#: The windows the Tasks page offers.
WINDOWS: dict[str, timedelta] = {"1h": timedelta(hours=1), "1d": timedelta(days=1)}
#: The longest text the arguments search takes.
MAX_SEARCH = 200


def _within(name: str, value: str) -> timedelta:
    if value not in WITHIN:
        raise ConfigError(f"{name}: expected one of {', '.join(WITHIN)}, got {value[:100]!r}")
    return WITHIN[value]


def _window(name: str, value: str) -> timedelta:
    if value not in WINDOWS:
        raise ConfigError(f"{name}: expected one of {', '.join(WINDOWS)}, got {value[:100]!r}")
    return WINDOWS[value]


def _scope(name: str, value: str) -> str:
    if value not in ("selected", "all"):
        raise ConfigError(f"{name}: expected selected or all, got {value[:100]!r}")
    return value


_QUERY: dict[str, Callable[[str, str], Any]] = {
    "queue": _name,
    "task": _name,
    "id": lambda name, value: _text(name, value, limit=config.MAX_ID_BYTES),
    "state": _state,  # the first of the list, for the pages that take one
    "since": _time,
    "until": _time,
    "cursor": _cursor,
    "action": _text,
    "type": _text,
    "message": _text,
    "worker": lambda name, value: _text(name, value, limit=config.MAX_ID_BYTES),
    "q": lambda name, value: _text(name, value, limit=MAX_SEARCH),
    "within": _within,
    "window": _window,
    "scope": _scope,
    "workflow": lambda name, value: _text(name, value, limit=config.MAX_ID_BYTES),
}
