import pytest

from elmo_plugin.training import glibc_heap


class FakeMallopt:
    """Records mallopt calls; answers 1 (glibc's success) or 0."""

    def __init__(self, answer: int = 1) -> None:
        self.calls: list = []
        self.answer = answer

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return self.answer


@pytest.fixture
def glibc(monkeypatch):
    monkeypatch.setattr(glibc_heap, "is_glibc", lambda: True)
    mallopt = FakeMallopt()
    monkeypatch.setattr(glibc_heap, "mallopt", mallopt)
    return mallopt


def test_keep_freed_heap_sets_the_mmap_threshold_to_32_mib_then_the_trim_threshold_to_1_gib(glibc):
    """Blocks up to 32 MiB come from the heap and up to 1 GiB freed at its top stays there; the
    mmap threshold goes first (glibc takes 32 MiB at most)."""
    done = glibc_heap.keep_freed_heap({"HOME": "/root"})
    assert glibc.calls == [(-3, 32 << 20), (-1, 1 << 30)]
    assert done == "heap kept: mmap threshold 32 MiB, trim threshold 1024 MiB"


def test_keep_freed_heap_says_so_when_glibc_refuses(glibc, caplog):
    glibc.answer = 0
    assert glibc_heap.keep_freed_heap({}) == "heap left as it is (mallopt refused)"
    assert "refused" in caplog.text


@pytest.mark.parametrize(
    "setting",
    [
        ("MALLOC_TRIM_THRESHOLD_", "131072"),
        ("MALLOC_MMAP_THRESHOLD_", "131072"),
        ("MALLOC_TOP_PAD_", "0"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072"),
    ],
)
def test_keep_freed_heap_leaves_the_heap_alone_where_the_user_set_it(setting, glibc):
    """glibc's own MALLOC_* variables and GLIBC_TUNABLES in the given environment win: mallopt
    is never called."""
    assert glibc_heap.keep_freed_heap(dict([setting])) == f"heap left to your {setting[0]}"
    assert glibc.calls == []


def test_keep_freed_heap_leaves_other_c_libraries_alone(glibc, monkeypatch):
    monkeypatch.setattr(glibc_heap, "is_glibc", lambda: False)
    assert glibc_heap.keep_freed_heap({}) == "heap left as it is (not glibc)"
    assert glibc.calls == []


def test_is_glibc_needs_linux_and_glibc(monkeypatch):
    monkeypatch.setattr(glibc_heap.platform, "system", lambda: "Linux")
    monkeypatch.setattr(glibc_heap.platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert glibc_heap.is_glibc()
    monkeypatch.setattr(glibc_heap.platform, "libc_ver", lambda: ("", ""))  # e.g. musl
    assert not glibc_heap.is_glibc()
    monkeypatch.setattr(glibc_heap.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(glibc_heap.platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert not glibc_heap.is_glibc()
