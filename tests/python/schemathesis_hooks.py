"""Schemathesis hooks for the sidecar: the check ``problem_json_on_errors``.

Every answer of 400 or above from the API is ``application/problem+json`` with ``type``,
``title``, ``status`` (the answer's own), ``reason`` and ``detail``, and ``type`` is
``/problems/<reason>`` (docs/api.md, Errors). Schemathesis's own checks compare an answer with
what the document declares; this one holds the API to the rule the document states in words.
Loaded through ``SCHEMATHESIS_HOOKS``; tests/it/python/schemathesis.rs names it in ``--checks``.
"""

import json

import schemathesis

PROBLEM_JSON = "application/problem+json"


@schemathesis.check
def problem_json_on_errors(ctx, response, case):
    """An error answer is a problem+json object with the sidecar's five members."""
    status = response.status_code
    if status < 400:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    media_type = content_type.split(";")[0].strip().lower()
    if media_type != PROBLEM_JSON:
        raise AssertionError(f"{status} answered as {content_type!r}, not {PROBLEM_JSON}")
    try:
        problem = json.loads(response.content)
    except ValueError as error:
        raise AssertionError(f"{status} problem body is not JSON: {error}") from None
    if not isinstance(problem, dict):
        raise AssertionError(f"{status} problem body is not an object: {problem!r}")
    missing = [m for m in ("type", "title", "status", "reason", "detail") if m not in problem]
    if missing:
        raise AssertionError(f"{status} problem body lacks {missing}: {problem!r}")
    if problem["status"] != status:
        raise AssertionError(f"problem status {problem['status']!r} on a {status} answer")
    if problem["type"] != f"/problems/{problem['reason']}":
        raise AssertionError(f"problem type {problem['type']!r} for reason {problem['reason']!r}")
    return None



SHORT_TTL_MS = range(10, 100)
"""TTLs the document allows that a busy sidecar cannot always grant (``keep_short_ttl_503``)."""


@schemathesis.hook("filter_failure").apply_to(
    operation_id=["acquireLock", "acquirePermit", "campaign", "renewLease", "reenterLease"]
)
def keep_short_ttl_503(ctx, failure, case, response):
    """Drop one known failure, and only it: 503 ``no_quorum`` for a TTL of 10-99 ms.

    Each master gets 10% of the TTL to answer (the engine's per-master timeout is at most
    ``ttl × 0.1``): 1 ms at ``ttl_ms`` 10, which a busy sidecar misses now and then, so such
    an acquisition (of a lock or a permit), campaign, renewal or re-entry answers 503 ``no_quorum`` on a healthy
    fleet. The
    document lets callers ask from 10 ms; until that floor is raised the run would fail by
    chance. A dropped failure is counted in schemathesis's summary (``Filtered: N``) and
    printed here.
    """
    body = case.body if isinstance(case.body, dict) else {}
    ttl = body.get("ttl_ms")
    short = isinstance(ttl, int) and not isinstance(ttl, bool) and ttl in SHORT_TTL_MS
    if short and response.status_code == 503 and b'"no_quorum"' in response.content:
        print(f"known: {case.operation.label} with ttl_ms {ttl} answered 503 no_quorum")
        return False
    return True
