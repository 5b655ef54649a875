"""An encoder-decoder Transformer whose every attention map comes back as a value.

The folders are the layers, each importing only layers below it: `model` (torch only) and `text` at the bottom,
then `decoding`, `analysis`, `io` (our file formats), `hugging_face` (its models read from their files), `viz` (the
only Plotly user), `training`, and `cli` on top. What each may import is tests/test_layout.py's ALLOWED table.
"""
