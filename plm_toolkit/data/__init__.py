"""Corpora, tokenizers, example building and batching for pretraining."""
