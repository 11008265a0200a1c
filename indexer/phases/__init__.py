"""The phases of a build after discovery, each bringing one store up to the tree: the
embedding phase (vectors for chunks that lack them) and, beside it, the graph's and history's."""
