"""Records of the graph's reads that cross layers: reference rows, definitions found by name,
the file filter every read takes, and what a reader may rely on while a build runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from indexer.parse.testpaths import sql_is_test_path


@dataclass(frozen=True, slots=True)
class RefRow:
    """One reference to a definition asked about."""

    path: str
    line: int
    col: int
    name: str
    kind: str
    enclosing_id: int | None
    enclosing: str  # the enclosing definition's qualified name ("" at module level)
    target_id: int  # the definition asked about that this reference reaches
    resolution: str
    confidence: float
    ambiguous: bool  # reached as one candidate of an unresolved reference


@dataclass(frozen=True, slots=True)
class FileFilter:
    """Conditions on the files a read returns: a language, a path GLOB (already a pattern),
    test code left out."""

    lang: str | None = None
    glob: str | None = None
    exclude_tests: bool = False
    #: only files of these languages (those of the kinds a search asks for); empty: any
    langs: tuple[str, ...] = ()

    def sql(self, file_alias: str = "f") -> tuple[str, list]:
        """`` AND ...`` conditions on the files table aliased ``file_alias``, and parameters."""
        sql, params = "", []
        if self.exclude_tests:
            tests, globs = sql_is_test_path(f"{file_alias}.path")
            sql += f" AND NOT {tests}"
            params.extend(globs)
        if self.lang:
            sql += f" AND {file_alias}.language = ?"
            params.append(self.lang)
        if self.langs:
            sql += f" AND {file_alias}.language IN ({','.join('?' * len(self.langs))})"
            params.extend(self.langs)
        if self.glob:
            sql += f" AND {file_alias}.path GLOB ?"
            params.append(self.glob)
        return sql, params


#: No condition: every indexed file.
ANY_FILE = FileFilter()


class NamedDefinition(NamedTuple):
    """A definition found by name (the lookups of task identifiers)."""

    qualname: str
    kind: str
    start_line: int
    end_line: int
    path: str
    language: str  # "" when unknown


#: meta key of a build in progress: {"phase", "pid", "since"}; absent when no build is running
#: (or the last one finished). Readers use it to say what is ready while a first build runs.
BUILD_PHASE = "build_phase"
#: What a reader can rely on in each phase of a build that writes in place.
PHASES = {
    "parse": "definitions and lexical search fill in as files are written; references follow",
    "resolve": "definitions and lexical search are ready; references are being resolved",
    "finalize": "definitions, lexical search and references are ready; indexes are being built",
    "history": "the graph is ready; the commit history is being indexed",
    "embed": "the graph is ready; chunks are being embedded for semantic search",
}
