"""Small random Hugging Face models of each family read here, saved the way `save_pretrained` saves them with a
tokenizer trained on the sentences given: the importers' tests and the families' speed benchmark build from these.

Needs `transformers` (requirements-dev.txt); nothing is downloaded.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
from tokenizers import ByteLevelBPETokenizer, Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BartTokenizer,
    M2M100Config,
    M2M100ForConditionalGeneration,
    M2M100Tokenizer,
    MarianConfig,
    MarianMTModel,
    MarianTokenizer,
    MBart50Tokenizer,
    MBartConfig,
    MBartForConditionalGeneration,
    MT5Config,
    MT5ForConditionalGeneration,
    NllbTokenizer,
    T5Config,
    T5ForConditionalGeneration,
    T5Tokenizer,
)

# The tests' size: every option exercised, every map small. The benchmark passes wider ones.
TINY = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)  # fmt: skip
FAIRSEQ_IDS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def save_random(
    model, directory: Path, rare_from: int | None = None, forced: int | None = None, rare: tuple[int, ...] = ()
) -> Path:
    """Saves `model` with weights far from their initial values (every weight matters); the ids from rare_from on
    (language codes, unused rows) and those in `rare` seldom chosen, so that outputs hold text; `forced` the first
    output token."""
    model.eval()
    model.generation_config.forced_bos_token_id = forced  # where transformers 5 keeps it (4 kept it in config.json)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
        if rare_from is not None:
            model.get_input_embeddings().weight[rare_from:] *= 0.1
        for token in rare:
            model.get_input_embeddings().weight[token] *= 0.1
    model.save_pretrained(directory)
    return directory


def spm_model(sentences: list[str], vocab_size: int, model_type: str = "unigram", **special_ids: int) -> bytes:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocab_size,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        model_type=model_type,
        **special_ids,
    )
    return buffer.getvalue()


def spm_pieces(proto: bytes) -> list[str]:
    """A SentencePiece model's pieces but its control and unknown ones (what fairseq's vocabularies list)."""
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(proto)
    return [
        processor.IdToPiece(i)
        for i in range(processor.GetPieceSize())
        if not processor.IsControl(i) and not processor.IsUnknown(i)
    ]


def save_marian(directory: Path, source: list[str], target: list[str], sizes: dict = TINY) -> Path:
    """Marian (swish, scaled embeddings, a final logits bias), a SentencePiece model per side, en→fr."""
    protos = spm_model(source, 40), spm_model(target, 40)
    vocabulary = ["</s>", "<unk>", *dict.fromkeys(spm_pieces(protos[0]) + spm_pieces(protos[1])), ">>fra<<", "<pad>"]
    (directory / "source.spm").write_bytes(protos[0])
    (directory / "target.spm").write_bytes(protos[1])
    (directory / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocabulary)}))
    files = [str(directory / name) for name in ("source.spm", "target.spm", "vocab.json")]
    MarianTokenizer(*files, source_lang="en", target_lang="fr").save_pretrained(directory)
    pad = len(vocabulary) - 1
    config = MarianConfig(
        vocab_size=len(vocabulary),
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
        **sizes,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)
    return save_random(model, directory)


def save_m2m100(directory: Path, sentences: list[str], sizes: dict = TINY) -> Path:
    """M2M100 (pre-norm, final norms, offset sinusoids), its SentencePiece model and vocab.json, en→fr."""
    proto = spm_model(sentences, 60, "bpe")
    (directory / "sentencepiece.bpe.model").write_bytes(proto)
    vocabulary = ["<s>", "<pad>", "</s>", "<unk>", *spm_pieces(proto)]
    (directory / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocabulary)}))
    files = [str(directory / name) for name in ("vocab.json", "sentencepiece.bpe.model")]
    M2M100Tokenizer(*files, src_lang="en", tgt_lang="fr").save_pretrained(directory)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=len(vocabulary) + 100 + 8, **FAIRSEQ_IDS, **sizes))
    return save_random(model, directory, rare_from=len(vocabulary))


def save_nllb(directory: Path, sentences: list[str], sizes: dict = TINY) -> Path:
    """NLLB-200 (M2M100's class, two embedding rows past the tokens) with a BPE tokenizer.json and the 202 language
    codes, eng_Latn→fra_Latn."""
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    bpe.train_from_iterator(
        sentences, trainers.BpeTrainer(vocab_size=120, special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    )
    vocabulary = bpe.get_vocab()
    merges = [tuple(merge) for merge in json.loads(bpe.to_str())["model"]["merges"]]
    tokenizer = NllbTokenizer(vocab=vocabulary, merges=merges, src_lang="eng_Latn", tgt_lang="fra_Latn")
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=len(tokenizer) + 2, **FAIRSEQ_IDS, **sizes))
    return save_random(model, directory, rare_from=len(vocabulary))


def save_mbart50(directory: Path, sentences: list[str], sizes: dict = TINY) -> Path:
    """mBART-50 (pre-norm, final and embedding norms, learned positions from row 2), en_XX→fr_XX."""
    (directory / "sentencepiece.bpe.model").write_bytes(spm_model(sentences, 60))
    tokenizer = MBart50Tokenizer.from_pretrained(directory, src_lang="en_XX", tgt_lang="fr_XX")
    (directory / "sentencepiece.bpe.model").unlink()  # transformers 5 saves a tokenizer.json alone
    tokenizer.save_pretrained(directory)
    config = MBartConfig(
        vocab_size=len(tokenizer), activation_function="gelu", scale_embedding=True, **FAIRSEQ_IDS, **sizes
    )
    torch.manual_seed(0)
    return save_random(MBartForConditionalGeneration(config), directory, tokenizer.convert_tokens_to_ids("ar_AR"))


def save_bart(directory: Path, sentences: list[str], sizes: dict = TINY) -> Path:
    """BART (post-norm, embedding norms, learned positions from row 2) with a byte-level BPE, forced to start
    with <s>."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(sentences, vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(directory))
    BartTokenizer.from_pretrained(directory).save_pretrained(directory)
    config = BartConfig(vocab_size=bpe.get_vocab_size(), activation_function="gelu", **FAIRSEQ_IDS, **sizes)
    torch.manual_seed(0)
    return save_random(BartForConditionalGeneration(config), directory, forced=0)


def save_t5(
    directory: Path, sentences: list[str], sizes: dict | None = None, flan: bool = False, multilingual: bool = False
) -> Path:
    """T5 (ReLU, the decoder's output scaled before the tied output layer) or, with flan, T5 v1.1's and Flan-T5's
    conventions (gated GELU, no output scale), or mT5's (MT5ForConditionalGeneration, the same as Flan-T5's); RMS
    norms, no biases, relative position buckets, a unigram tokenizer.json whose embedding has rows past its tokens."""
    t5_ids = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1)  # T5's own SentencePiece model's
    (directory / "spiece.model").write_bytes(spm_model(sentences, 60, **t5_ids))
    tokenizer = T5Tokenizer.from_pretrained(directory, extra_ids=4)
    (directory / "spiece.model").unlink()  # transformers 5 saves a tokenizer.json alone
    tokenizer.save_pretrained(directory)
    sizes = sizes or dict(
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
    )
    config_class, model_class = (
        (MT5Config, MT5ForConditionalGeneration) if multilingual else (T5Config, T5ForConditionalGeneration)
    )
    config = config_class(
        vocab_size=len(tokenizer) + 12,
        feed_forward_proj="gated-gelu" if flan or multilingual else "relu",
        tie_word_embeddings=not (flan or multilingual),
        decoder_start_token_id=0,
        **sizes,
    )
    torch.manual_seed(0)
    return save_random(model_class(config), directory, rare_from=len(tokenizer), rare=(0, 2))
