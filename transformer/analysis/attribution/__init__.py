"""Attribution beside attention: what each output token of a decode drew on, measured three more ways.

Attention weights alone are not an explanation: a head may weigh a token whose value vector is
nearly zero, and gradients may disagree with it. For every step t of a decode result:

- value-weighted attention (Kobayashi et al., EMNLP 2020): ||alpha_tj f_h(x_j)||, with f_h the value
  projection followed by head h's slice of W_O, as shares of the row;
- gradient x input (captum) and integrated gradients (here, one forward pass serving every output step; the
  tests hold it to captum's) of log p(chosen token) with respect to the token embeddings of the source and of
  the target prefix, summed over the embedding dimension;
- contrastive: the same for log p(A) - log p(B), why A rather than a candidate B;
- agreement: Spearman's rank correlation of each head's cross-attention row with |integrated gradients|.

`gradients` computes integrated gradients and gradient x input; `measures` builds every measure of a decode from
them. The model is differentiated through embeddings passed to encode/decode, never through hooks on the shared
modules (which would fire in every visitor's forward).
"""
