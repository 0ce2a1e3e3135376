"""The HTTP layer's pure decisions: status mapping, validation messages, body limits."""

from __future__ import annotations

import pytest

from ragindex.errors import BackendUnavailable, IdentityMismatch, InvalidInput
from ragindex.router.http import error_message, status_for_error, validation_message
from ragindex.router.middleware import body_too_large


class Wrapped(Exception):
    """Shaped like Ray's RayTaskError: the original error is `.cause`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("remote call failed")
        self.cause = cause


@pytest.mark.parametrize(
    ("err", "status"),
    [
        (InvalidInput("bad"), 400),
        (IdentityMismatch("other model"), 409),
        (BackendUnavailable("down"), 503),
        (RuntimeError("bug"), 500),
        (Wrapped(InvalidInput("bad")), 400),
        (Wrapped(BackendUnavailable("down")), 503),
    ],
)
def test_status_for_error(err: BaseException, status: int) -> None:
    assert status_for_error(err) == status


def test_error_message_unwraps_remote_errors() -> None:
    assert error_message(Wrapped(InvalidInput("text is empty"))) == "text is empty"


def test_invalid_json_is_400_and_says_so() -> None:
    status, message = validation_message(
        [{"type": "json_invalid", "loc": ("body", 5), "ctx": {"error": "Expecting value"}}]
    )
    assert status == 400
    assert message == "request body is not valid JSON: Expecting value"


def test_schema_errors_are_422_and_name_the_field() -> None:
    errors = [{"type": "int_type", "loc": ("body", "k"), "msg": "Input should be a valid integer"}]
    status, message = validation_message(errors * 7)
    assert status == 422
    assert message.startswith("invalid request: k: Input should be a valid integer")
    assert message.endswith("(and 2 more)")


@pytest.mark.parametrize(
    ("declared", "too_large"),
    [(None, False), ("10", False), ("100", False), ("101", True), ("abc", True)],
)
def test_body_too_large(declared: str | None, too_large: bool) -> None:
    assert body_too_large(declared, 100) is too_large
