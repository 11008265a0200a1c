"""From files to rows: discovery, languages and their tree-sitter queries, parsing, chunking, and the workers that run them."""
