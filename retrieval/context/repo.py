"""What assembly reads from the index: definitions by id, by file and by span, their enclosing
classes, and file lines, each loaded once per pack."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import denied_by_default, read_regular

if TYPE_CHECKING:
    from indexer import Index

# --------------------------------------------------------------------------- index access


@dataclass(slots=True)
class Sym:
    id: int
    path: str
    name: str
    qualname: str
    kind: str
    start: int
    end: int
    signature: str
    doc: str
    parent: int | None
    language: str
    module: str
    nbytes: int

    @property
    def local(self) -> str:
        """The qualified name inside its file (``Cart.add``)."""
        if self.module and self.qualname.startswith(self.module + "."):
            return self.qualname[len(self.module) + 1 :]
        return self.qualname


class Repo:
    """Cached reads of the index and of the files on disk."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.root: Path = index.root
        self.syms: dict[int, Sym] = {}
        self._file_syms: dict[str, list[Sym]] = {}
        self._lines: dict[str, list[str] | None] = {}
        self._paths: set[str] | None = None

    def load(self, ids: Iterable[int]) -> None:
        """Load symbols and their ancestors."""
        want = [i for i in set(ids) if i not in self.syms]
        while want:
            for row in self.index.graph.definition_details(want):
                self.syms[row[0]] = Sym(*row)
            want = list(
                {
                    s.parent
                    for s in self.syms.values()
                    if s.parent is not None and s.parent not in self.syms
                }
            )

    def file_symbols(self, path: str) -> list[Sym]:
        if path not in self._file_syms:
            rows = self.index.graph.definition_details_in_file(path)
            syms = [Sym(*row) for row in rows]
            for s in syms:
                self.syms.setdefault(s.id, s)
            self._file_syms[path] = syms
        return self._file_syms[path]

    def symbols_between(self, path: str, start: int, end: int) -> list[Sym]:
        """Definitions (not modules) that overlap lines ``start``-``end`` of ``path``."""
        if path in self._file_syms:
            return [
                s
                for s in self._file_syms[path]
                if s.kind != "module" and s.start <= end and s.end >= start
            ]
        rows = self.index.graph.definition_details_between(path, start, end)
        syms = [Sym(*row) for row in rows]
        for s in syms:
            self.syms.setdefault(s.id, s)
        return syms

    def top(self, sym: Sym) -> Sym:
        """The outermost definition around ``sym`` (itself when top-level)."""
        seen = 0
        while sym.parent is not None and sym.parent in self.syms and seen < 32:
            sym = self.syms[sym.parent]
            seen += 1
        return sym

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            # No link out of the tree or to a secret followed; a FIFO or device gives None.
            data = read_regular(self.root, path, refuse=denied_by_default)
            self._lines[path] = (
                None if data is None else data.decode("utf-8", errors="replace").splitlines()
            )
        return self._lines[path]

    def paths(self) -> set[str]:
        if self._paths is None:
            self._paths = set(self.index.graph.all_paths())
        return self._paths
