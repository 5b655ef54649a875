"""An encoder-decoder Transformer whose every attention map comes back as a value.

The folders are the layers, each importing only those listed before it:
`model` (torch only), `text`, `decoding`, `analysis`, `io`, `viz` (the only Plotly user),
`training`, and `cli` on top.
"""
