"""Embeddings: the models, their tokenizers, and the LanceDB table of chunk vectors."""
