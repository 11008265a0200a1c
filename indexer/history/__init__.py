"""The git-history index (`<index>/history.db`): commits reachable from the indexed HEAD, the
files each touched, searchable by message; written after the graph, read by retrieval."""
