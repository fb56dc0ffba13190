import pytest

from elmo_plugin.modules import glibc_heap


class FakeLibc:
    """Records mallopt calls; answers 1 (glibc's success) or 0."""

    def __init__(self, answer: int = 1) -> None:
        self.calls, self.answer = [], answer

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return self.answer


@pytest.fixture
def glibc(monkeypatch):
    for name in glibc_heap.USER_SETTINGS + ("ELMO_PLUGIN_KEEP_HEAP",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(glibc_heap.platform, "system", lambda: "Linux")
    monkeypatch.setattr(glibc_heap.platform, "libc_ver", lambda: ("glibc", "2.36"))
    libc = FakeLibc()
    monkeypatch.setattr(glibc_heap.ctypes, "CDLL", lambda _: libc)
    return libc


def test_keep_freed_heap_sets_the_mmap_threshold_to_32_mib_then_the_trim_threshold_to_1_gib(glibc):
    """Blocks up to 32 MiB come from the heap and up to 1 GiB freed at its top stays there; the
    mmap threshold goes first (glibc takes 32 MiB at most)."""
    assert glibc_heap.keep_freed_heap.__wrapped__() is True
    assert glibc.calls == [(-3, 32 << 20), (-1, 1 << 30)]


def test_keep_freed_heap_says_so_when_glibc_refuses(glibc, caplog):
    glibc.answer = 0
    assert glibc_heap.keep_freed_heap.__wrapped__() is False
    assert "refused" in caplog.text


@pytest.mark.parametrize(
    "setting",
    [
        ("ELMO_PLUGIN_KEEP_HEAP", "0"),
        ("MALLOC_TRIM_THRESHOLD_", "131072"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072"),
    ],
)
def test_keep_freed_heap_leaves_the_heap_alone_where_the_user_set_it_or_opted_out(
    setting, glibc, monkeypatch
):
    """glibc's own MALLOC_* variables and GLIBC_TUNABLES win, and ELMO_PLUGIN_KEEP_HEAP=0 opts out:
    mallopt is never called."""
    monkeypatch.setenv(*setting)
    assert glibc_heap.keep_freed_heap.__wrapped__() is False
    assert glibc.calls == []


def test_keep_freed_heap_leaves_other_c_libraries_alone(glibc, monkeypatch):
    monkeypatch.setattr(glibc_heap.platform, "libc_ver", lambda: ("", ""))
    assert glibc_heap.keep_freed_heap.__wrapped__() is False
    assert glibc.calls == []
