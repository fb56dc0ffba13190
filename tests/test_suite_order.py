"""The suite's order: the tests marked `slow` first, each group in pytest-randomly's order
(tests/conftest.py), so that `make test`'s workers share the long tests from the start."""

from typing import Any, cast

import pytest

from tests.helpers import slow_tests_first


class Item:
    """What slow_tests_first reads of a pytest item: its markers."""

    def __init__(self, name: str, slow: bool):
        self.name, self.slow = name, slow

    def get_closest_marker(self, name: str) -> Any:
        return pytest.mark.slow.mark if self.slow and name == "slow" else None


def test_slow_tests_come_first_and_each_group_keeps_its_order():
    items = [Item("a", False), Item("b", True), Item("c", False), Item("d", True)]
    ordered = slow_tests_first(cast(list[pytest.Item], items))
    assert [cast(Item, item).name for item in ordered] == ["b", "d", "a", "c"]


def test_this_sessions_items_are_in_that_order(request):
    """In the whole suite (whose order puts a slow test after another test nearly always)."""
    slow = [item.get_closest_marker("slow") is not None for item in request.session.items]
    assert slow == sorted(slow, reverse=True)
