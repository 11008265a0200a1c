"""Records that cross layers: frozen dataclasses, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field

# Definition kinds, normalised across languages.
CLASS_KINDS = frozenset({"class", "struct", "interface", "enum", "trait", "union", "namespace", "impl"})
FUNCTION_KINDS = frozenset({"function", "method"})


@dataclass(frozen=True, slots=True)
class Span:
    """1-based inclusive line span plus 0-based byte offsets."""

    start_line: int
    end_line: int
    start_byte: int = 0
    end_byte: int = 0


@dataclass(frozen=True, slots=True)
class Definition:
    """A definition found by the parser in one file.

    ``parent`` is the index (in the file's definition list) of the enclosing definition, or -1.
    """

    name: str
    qualname: str  # file-local dotted path, e.g. "Outer.method"
    kind: str
    span: Span
    signature: str
    doc: str = ""
    parent: int = -1


@dataclass(frozen=True, slots=True)
class Reference:
    """A use of a name. ``receiver`` is the dotted expression before the name, if any
    (``self`` in ``self.save()``, ``os.path`` in ``os.path.join()``)."""

    name: str
    kind: str  # call | import | inherit | type | attribute
    line: int
    col: int
    receiver: str = ""
    enclosing: int = -1  # index into the file's definitions, -1 for module level


@dataclass(frozen=True, slots=True)
class Import:
    """One imported name. ``module`` is absolute where it can be made so (Python relative
    imports are resolved against the file's package); ``name`` is empty for ``import module``."""

    module: str
    name: str
    alias: str  # the name bound in the importing file
    line: int
    level: int = 0  # Python relative-import level as written


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """Everything the parser extracts from one file."""

    path: str
    language: str
    module: str  # dotted module name derived from the path
    definitions: tuple[Definition, ...]
    references: tuple[Reference, ...]
    imports: tuple[Import, ...]
    has_errors: bool = False
    lines: int = 0
    doc: str = ""  # the module docstring or leading comment
    #: Lines where a statement of the module or of a definition body starts: where a chunk
    #: too large for the embedding model may be cut.
    breaks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SymbolRecord:
    """A definition as stored in the index."""

    id: int
    path: str
    name: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    signature: str
    doc: str = ""
    language: str = ""
    parent_id: int | None = None
    stale: bool = False  # the file changed on disk since it was indexed


@dataclass(frozen=True, slots=True)
class RefRecord:
    """A reference as stored in the index, with how it was resolved."""

    path: str
    line: int
    col: int
    name: str
    kind: str
    enclosing: str  # qualname of the enclosing definition, "" at module level
    target_id: int | None
    resolution: str
    confidence: float
    stale: bool = False  # the file changed on disk since it was indexed


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress event of a long phase (discover, parse, resolve, embed)."""

    phase: str
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class BuildStats:
    """Summary of one ``index build``."""

    files_total: int = 0
    files_parsed: int = 0
    files_deleted: int = 0
    files_unchanged: int = 0
    files_with_errors: int = 0
    lines: int = 0
    symbols: int = 0
    references: int = 0
    resolved: int = 0
    ambiguous: int = 0
    by_language: dict[str, int] = field(default_factory=dict)
    #: Files indexed by kind (code | docs | config, see `indexer.parse.languages.KINDS`).
    by_kind: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    generation: int = 0
    full: bool = False
    #: Figures of the embedding phase (see indexer.phases.semantic.EmbedStats); empty when skipped.
    embedding: dict = field(default_factory=dict)
    #: Seconds per phase: discover, parse (wall, workers and writes overlapped), write (the
    #: driver's SQLite writes within parse), resolve, finalize (indexes, counts), embed.
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def resolved_pct(self) -> float:
        return 100.0 * self.resolved / self.references if self.references else 0.0
