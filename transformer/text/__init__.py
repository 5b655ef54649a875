"""Text in and out of the model: the SentencePiece tokenizer and sentence files."""

from transformer.text.files import read_lines, read_parallel, text_lines
from transformer.text.tokenizer import Tokenizer, TokenizerError, train_tokenizer

__all__ = ["Tokenizer", "TokenizerError", "read_lines", "read_parallel", "text_lines", "train_tokenizer"]
