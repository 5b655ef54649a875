"""What a training run is given: one dataclass, stored in every checkpoint it writes for reproduction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformer.model.config import TransformerConfig
from transformer.training.corpora import Corpus

DEFAULT_MODEL = TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, max_len=128)
DATA_FIELDS = {"train_src", "train_tgt", "val_src", "val_tgt", "train_weights", "out"}  # metadata's "data" says these


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run is given; stored in the checkpoint for reproduction."""

    train_src: tuple[str, ...]  # one file per corpus (a single path is one corpus)
    train_tgt: tuple[str, ...]  # line N translates line N of the same corpus's train_src
    val_src: tuple[str, ...]  # one file per validation set; the best checkpoint has the best mean BLEU over them
    val_tgt: tuple[str, ...]
    out: str  # the best checkpoint by validation BLEU
    train_weights: tuple[float, ...] = ()  # times an epoch reads each corpus (0.5: a new random half each epoch); 1s
    src_lang: str = "en"
    tgt_lang: str = "fr"
    # The model to train. Its vocabulary size is what the joint tokenizer is asked for; the trained
    # tokenizer's real size and special ids replace the config's.
    model: TransformerConfig = DEFAULT_MODEL
    tokenizer_type: str = "unigram"  # SentencePiece model type: unigram, bpe, word, char
    tokenizer_sample: int = 1_000_000  # sentences (both sides, drawn as the weights say) the vocabulary is trained on
    epochs: int = 30
    max_steps: int = 0  # stop (and save) after this many steps in all; 0: no limit
    max_tokens: int = 4000  # padded tokens per side of a batch
    lr_factor: float = 0.5  # scales the Noam schedule
    warmup: int = 800
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    patience: int = 5  # epochs without a better validation BLEU before stopping
    seed: int = 1
    snapshot_epochs: tuple[int, ...] = ()  # also keep the model after these epochs
    save_every: int = 200  # steps between saves of the resumable state
    save_dtype: str = "float16"
    val_limit: int = 0  # validate on the first N sentences only; 0: all
    max_seconds: float = 0  # start no new epoch after this much training time in this call; 0: no limit
    keep_last: int = 0  # also keep the models of the last N epochs (and the untrained start) beside --out; 0: none
    cpu_bfloat16: bool = False  # bfloat16 autocast on the CPU as on a GPU: faster on cores with bfloat16 instructions

    def __post_init__(self) -> None:
        for name in ("train_src", "train_tgt", "val_src", "val_tgt"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        weights = tuple(float(w) for w in self.train_weights) or (1.0,) * len(self.train_src)
        object.__setattr__(self, "train_weights", weights)
        if not len(self.train_src) == len(self.train_tgt) == len(weights):
            raise ValueError(
                f"{len(self.train_src)} source files, {len(self.train_tgt)} target files and "
                f"{len(weights)} weights: give one of each per training corpus"
            )
        if not self.val_src:
            raise ValueError("give at least one validation set (--val-src and --val-tgt)")
        if len(self.val_src) != len(self.val_tgt):
            raise ValueError(f"{len(self.val_src)} validation source files but {len(self.val_tgt)} target files")
        if not all(w > 0 for w in weights):
            raise ValueError("every corpus weight must be above 0 (leave a corpus out instead)")

    @property
    def corpora(self) -> tuple[Corpus, ...]:
        return tuple(Corpus(s, t, w) for s, t, w in zip(self.train_src, self.train_tgt, self.train_weights))

    @property
    def validation_sets(self) -> tuple[Corpus, ...]:
        return tuple(Corpus(s, t) for s, t in zip(self.val_src, self.val_tgt))

    @property
    def state_path(self) -> Path:
        return Path(self.out).with_suffix(".state.safetensors")

    @property
    def cache_path(self) -> Path:
        """The training data's ids, prepared once (see corpora.prepared_pairs)."""
        return Path(self.out).with_suffix(".data.npz")
