"""A parsed file as the rows the graph stores: the tuples `graph_write` inserts, built in the
parse worker (a pool process or a Ray task) so that the build's single writer only executes
the inserts. Plain tuples also cross the process boundary many times faster than the frozen
dataclasses they are made from, whose unpickling would run in the writer's process.

Rows leave out the file id, which only the writer knows: graph_write's statements take it as
their last column.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from indexer.blake2 import blake2b
from indexer.models import ParsedFile
from indexer.parse.chunking import Chunk
from indexer.parse.terms import file_document, index_terms


@dataclass(frozen=True, slots=True)
class FileRows:
    """One parsed file's rows, in the order of graph_write's column lists."""

    language: str
    module: str
    lines: int
    #: (id, name, qualname, kind, start_line, end_line, start_byte, end_byte, signature, doc,
    #: parent_id): the module's own row, then one per definition
    symbols: list[tuple]
    #: (name, kind, line, col, receiver, enclosing_id)
    refs: list[tuple]
    #: (module, name, alias, line, level)
    imports: list[tuple]
    #: (id, symbol, kind, start_line, end_line, tokens, header, content_hash)
    chunks: list[tuple]
    #: (id, path, symbol, body) of `chunks_fts`, one per chunk in the same order
    chunk_terms: list[tuple]
    #: (path, names, body) of the whole-file lexical document; None without chunks
    document: tuple[str, str, str] | None


def file_rows(path: str, pf: ParsedFile, chunks: Sequence[Chunk]) -> FileRows:
    """The rows of the file at ``path``, parsed into ``pf`` and cut into ``chunks``."""
    ids: list[int] = []
    seen: Counter = Counter()
    # The module is part of every id: when a package boundary moves, ids change and the
    # references that named the old module are re-resolved like any other changed name.
    mod_id = stable_id(pf.path, pf.module, "", "module")
    last = pf.module.rsplit(".", 1)[-1]
    symbols = [(mod_id, last, pf.module, "module", 1, max(pf.lines, 1), 0, 0, "", pf.doc, None)]
    for d in pf.definitions:
        key = (d.qualname, d.kind)
        seen[key] += 1
        sid = stable_id(pf.path, pf.module, d.qualname, d.kind, str(seen[key]))
        ids.append(sid)
        parent = ids[d.parent] if d.parent >= 0 else None
        qual = f"{pf.module}.{d.qualname}" if pf.module else d.qualname
        symbols.append((sid, d.name, qual, d.kind, d.span.start_line, d.span.end_line,
                        d.span.start_byte, d.span.end_byte, d.signature, d.doc, parent))
    refs = [(r.name, r.kind, r.line, r.col, r.receiver, ids[r.enclosing] if r.enclosing >= 0 else mod_id)
            for r in pf.references]
    imports = [(i.module, i.name, i.alias, i.line, i.level) for i in pf.imports]
    chunk_rows, chunk_terms = [], []
    path_terms = index_terms(path)
    for c in chunks:
        cid = stable_id(path, str(c.start_line), str(c.end_line), c.content_hash)
        chunk_rows.append((cid, _qualify(pf.module, c.symbol), c.kind, c.start_line, c.end_line,
                           c.tokens, c.header, c.content_hash))
        chunk_terms.append((cid, path_terms, index_terms(c.symbol), c.terms))
    document = None
    if chunks:
        # the order in which the writer's database would list the file's symbols: by id
        names = [name for _, name in sorted((s[0], s[1]) for s in symbols if s[3] != "module")]
        document = file_document(path, names, [c.terms for c in chunks])
    return FileRows(pf.language, pf.module, pf.lines, symbols, refs, imports, chunk_rows,
                    chunk_terms, document)


def _qualify(module: str, symbol: str) -> str:
    return f"{module}.{symbol}" if module and symbol else symbol or module


def stable_id(*parts: str) -> int:
    """A 63-bit id that stays the same while the parts do, so unchanged symbols keep their
    ids across builds and references to them stay valid."""
    digest = blake2b("\x1f".join(parts).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big") >> 1
