"""The HTTP layer's pure decisions: status mapping, validation messages, body limits."""

from __future__ import annotations

import pytest

from ragindex.errors import BackendUnavailable, IdentityMismatch, InvalidInput
from ragindex.router.http_problems import validation_message
from ragindex.router.middleware import body_too_large
from ragindex.router.problems import PROBLEMS, code_for_error, code_for_status, problem, unwrapped


class Wrapped(Exception):
    """Shaped like Ray's RayTaskError: the original error is `.cause`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("remote call failed")
        self.cause = cause


@pytest.mark.parametrize(
    ("err", "code", "status"),
    [
        (InvalidInput("bad"), "invalid-input", 400),
        (IdentityMismatch("other model"), "identity-mismatch", 409),
        (BackendUnavailable("down"), "unavailable", 503),
        (RuntimeError("bug"), "internal", 500),
        (Wrapped(InvalidInput("bad")), "invalid-input", 400),
        (Wrapped(BackendUnavailable("down")), "unavailable", 503),
    ],
)
def test_problem_for_error(err: BaseException, code: str, status: int) -> None:
    assert code_for_error(err) == code and PROBLEMS[code].status == status


def test_remote_errors_are_unwrapped() -> None:
    assert str(unwrapped(Wrapped(InvalidInput("text is empty")))) == "text is empty"


def test_problem_details_carry_a_stable_type_per_kind() -> None:
    body = problem("rate-limited", "tenant acme is over 10 requests/s")
    assert body == {
        "type": "urn:ragindex:problem:rate-limited",
        "title": PROBLEMS["rate-limited"].title,
        "status": 429,
        "detail": "tenant acme is over 10 requests/s",
        "code": "rate-limited",
    }
    assert code_for_status(401) == "unauthorized" and code_for_status(404) == "not-found"
    assert len({kind.title for kind in PROBLEMS.values()}) == len(PROBLEMS)


def test_invalid_json_is_400_and_says_so() -> None:
    code, message = validation_message(
        [{"type": "json_invalid", "loc": ("body", 5), "ctx": {"error": "Expecting value"}}]
    )
    assert code == "invalid-json" and PROBLEMS[code].status == 400
    assert message == "request body is not valid JSON: Expecting value"


def test_schema_errors_are_422_and_name_the_field() -> None:
    errors = [{"type": "int_type", "loc": ("body", "k"), "msg": "Input should be a valid integer"}]
    code, message = validation_message(errors * 7)
    assert code == "invalid-request" and PROBLEMS[code].status == 422
    assert message.startswith("invalid request: k: Input should be a valid integer")
    assert message.endswith("(and 2 more)")


@pytest.mark.parametrize(
    ("declared", "too_large"),
    [(None, False), ("10", False), ("100", False), ("101", True), ("abc", True)],
)
def test_body_too_large(declared: str | None, too_large: bool) -> None:
    assert body_too_large(declared, 100) is too_large
