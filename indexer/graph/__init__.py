"""The SQLite graph: its schema and generations, the rows a build writes, reference resolution, and reads (graph and lexical)."""
