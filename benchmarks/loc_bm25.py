"""Baseline: plain BM25 (bm25s) over whole files, every non-test .py file at the commit,
tokenized with the index's own identifier splitting (`indexer.parse.terms.index_terms`)."""

from __future__ import annotations

import os

from indexer.parse.terms import STOPWORDS, index_terms
from indexer.parse.testpaths import is_test_path

from .loc_repos import RepoTree


def tokens(text: str) -> list[str]:
    return [t for t in index_terms(text).split() if len(t) > 1 and t not in STOPWORDS]


class FileBM25:
    """Tokenized files are cached by blob sha, so moving between nearby commits costs only
    the changed files."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def rank(self, tree: RepoTree, query: str, k: int = 10) -> list[str]:
        import bm25s

        paths, corpus = [], []
        for path, sha in tree.python_files():
            if is_test_path(path):
                continue
            toks = self._cache.get(sha)
            if toks is None:
                try:
                    with open(
                        os.path.join(tree.tree, path), encoding="utf-8", errors="replace"
                    ) as fh:
                        toks = tokens(fh.read())
                except OSError:
                    continue
                self._cache[sha] = toks
            paths.append(path)
            corpus.append(toks or ["<empty>"])
        q = tokens(query)
        if not paths or not q:
            return []
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        docs, _scores = retriever.retrieve([q], k=min(k, len(paths)), show_progress=False)
        return [paths[int(i)] for i in docs[0]]
