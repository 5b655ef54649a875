"""One head, one value: its text form read back, its check against a model's shape, and every head in one order."""

import pytest

from transformer.model.config import TransformerConfig
from transformer.model.heads import Head, every_head
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe

CONFIG = TransformerConfig(8, 8, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=3)


def test_every_heads_text_form_reads_back_as_the_head_and_the_command_lines_form_is_read_too():
    heads = every_head(CONFIG)
    assert [Head.parse(str(head)) for head in heads] == heads
    assert str(Head(AttentionKind.CROSS, 2, 1)) == "cross.3.2" and Head.parse("cross:3:2") == Head.parse("cross.3.2")
    assert Head.numbered("decoder", 1, 1) == Head(AttentionKind.DECODER, 0, 0)
    assert Head(AttentionKind.ENCODER, 1, 3).label == "encoder · layer 2 · head 4"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("cross.3:2", "give KIND:LAYER:HEAD"),  # one separator, not two
        ("attention.1.1", "KIND one of encoder, decoder, cross"),
        ("cross.0.1", "count from 1"),
        ("cross.1.\u0662", "give KIND:LAYER:HEAD"),
    ],
)
def test_a_head_that_is_not_written_in_its_form_is_refused_saying_the_form(text, said):
    with pytest.raises(ValueError, match=said):
        Head.parse(text)


def test_a_head_past_the_models_shape_is_refused_naming_the_shape():
    Head.parse("cross.3.4").check(CONFIG)
    with pytest.raises(ValueError, match="cross.4.1: this model has 3 cross layers of 4 heads"):
        Head.parse("cross.4.1").check(CONFIG)
    with pytest.raises(ValueError, match="encoder.1.5: this model has 2 encoder layers of 4 heads"):
        Head.parse("encoder.1.5").check(CONFIG)


def test_every_head_lists_the_encoders_then_the_decoders_self_and_cross_heads_once_each():
    heads = every_head(CONFIG)
    assert len(heads) == len(set(heads)) == (2 + 3 + 3) * 4
    assert [head.kind for head in heads[:: CONFIG.n_heads]] == [AttentionKind.ENCODER] * 2 + [
        AttentionKind.DECODER
    ] * 3 + [AttentionKind.CROSS] * 3
    probe = Probe.ablating(heads[:3])
    assert probe.heads_off == frozenset(heads[:3]) and all(isinstance(head, Head) for head in probe.heads_off)
