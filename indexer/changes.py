"""What changed between the tree and the index: the files discovery found against the rows the
index holds, both ``(path, size, mtime_ns)`` sorted by path."""

from __future__ import annotations

from collections.abc import Sequence

#: Entries `unmatched` compares at once (in C) before it looks one by one.
_MATCH_STEP = 128


def unmatched(
    files: Sequence[tuple[str, int, int]], rows: Sequence[tuple[str, int, int]]
) -> tuple[list, list[str]]:
    """The ``files`` no row equals, and the paths of the ``rows`` no file equals; both are
    ``(path, size, mtime_ns)`` sorted by path. A merge that compares _MATCH_STEP entries at
    once where the two agree, which is nearly everywhere: ~2 ms for 25k files where building
    and subtracting sets of them took ~25."""
    files, rows = list(files), list(rows)
    nf, nr = len(files), len(rows)
    others: list = []
    gone: list[str] = []
    i = j = 0
    step = _MATCH_STEP
    while i < nf and j < nr:
        if files[i : i + step] == rows[j : j + step]:
            i += step
            j += step
            continue
        f, r = files[i], rows[j]
        if f == r:
            i += 1
            j += 1
        elif f[0] == r[0]:  # changed
            others.append(f)
            gone.append(r[0])
            i += 1
            j += 1
        elif f[0] < r[0]:  # new
            others.append(f)
            i += 1
        else:  # deleted
            gone.append(r[0])
            j += 1
    others.extend(files[i:])
    gone.extend(r[0] for r in rows[j:])
    return others, gone
