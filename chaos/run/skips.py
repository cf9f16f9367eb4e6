"""Why a test skipped, as data. A skip the rig means says which kind it is: the target lacks
a capability the test needs (its ``needs`` mark), the test is opt-in (the soak, explore), or
the target cannot start what the test needs (an attached deployment and a stack of the
test's own). Each skipped test's report carries its kind as a JUnit property
(``pdchaos_skip``); a skip of any other cause is ``unexpected``, and a run that must have
run what it collected (the kill matrix's clean run) fails on it."""

from __future__ import annotations

import enum
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["MARKED", "PROPERTY", "DeclaredSkip", "SkipKind", "kind_of", "skip", "unexpected_skips"]

PROPERTY = "pdchaos_skip"


class SkipKind(enum.StrEnum):
    CAPABILITY = "capability"  # the target lacks what the test needs
    OPT_IN = "opt-in"  # the test runs only when asked (--soak, --explore)
    TARGET = "target"  # the target cannot start a stack of the test's own
    UNEXPECTED = "unexpected"  # anything else: the run did not run what it collected


class DeclaredSkip(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """A skip the rig means, with its kind."""

    def __init__(self, reason: str, kind: SkipKind) -> None:
        super().__init__(msg=reason)
        self.kind = kind


MARKED = pytest.StashKey["SkipKind"]()  # a skip mark's kind, set where the mark is added


def kind_of(item: pytest.Item, error: BaseException | None) -> SkipKind:
    """The kind of a skip: the declared skip's own, or the kind of the skip mark added to
    the item; ``UNEXPECTED`` for any other."""
    if isinstance(error, DeclaredSkip):
        return error.kind
    return item.stash.get(MARKED, SkipKind.UNEXPECTED)


def skip(kind: SkipKind, reason: str) -> NoReturn:
    """Skip the test for a reason of ``kind`` (``pytest.skip`` with its kind kept)."""
    raise DeclaredSkip(reason, kind)


def unexpected_skips(junit: Path) -> list[str]:
    """The tests a JUnit report shows skipped for no declared reason: no ``pdchaos_skip``
    property, or ``unexpected``."""
    out = []
    for case in ET.parse(junit).iter("testcase"):
        skipped = case.find("skipped")
        if skipped is None or skipped.get("type") == "pytest.xfail":  # JUnit writes an xfail as a skip
            continue
        kinds = {p.get("value") for p in case.iter("property") if p.get("name") == PROPERTY}
        if not kinds or kinds == {SkipKind.UNEXPECTED.value}:
            out.append(f"{case.get('classname')}::{case.get('name')}")
    return out
