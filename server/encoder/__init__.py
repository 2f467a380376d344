"""The encoder side of mlxcel: a BERT-family model served for --embeddings and --reranking."""
