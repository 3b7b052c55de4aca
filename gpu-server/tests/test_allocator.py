"""The glibc malloc settings the server applies at start (core/allocator.py), checked in a fresh
process: glibc reads them before threads make their arenas, and malloc_info reports the arenas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.fast

# Eight threads each allocate and free blocks under the mmap threshold, as the engine, training and
# saving threads do; then malloc_info says how many arenas (heaps) the process has.
PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util, re, sys, tempfile, threading
    from art_server.core.allocator import keep_freed_memory
    if sys.argv[1] == "tuned":
        assert keep_freed_memory()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()  # all alive at once, so glibc cannot hand one thread's arena to the next
        blocks = [libc.malloc(4 << 20) for _ in range(4)]
        for b in blocks:
            libc.free(b)
        barrier.wait()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with tempfile.NamedTemporaryFile(suffix=".xml") as f:
        fp = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, fp)
        libc.fclose(fp)
        print(len(re.findall(r'<heap nr="', open(f.name).read())))
    """
)


def arenas(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings apply on Linux only")
def test_threads_share_two_arenas_so_kept_memory_is_bounded() -> None:
    # Without the cap each of the 8 threads gets an arena of its own (glibc allows 8 per core), and
    # each would keep up to the trim threshold of freed memory.
    assert arenas("default") > 2
    assert arenas("tuned") <= 2
