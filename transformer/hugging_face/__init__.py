"""Hugging Face translation models read from their saved files, without `transformers` and without executing
anything: `directory` (which family a directory is, and opening it), one module per family (`marian`, `m2m100` with
NLLB, `bart` with mBART-50, `t5`), what the BART-like families share (`seq2seq`), their tokenizer files
(`tokenizer_files`), and the one reader every importer reads through (`files`)."""
