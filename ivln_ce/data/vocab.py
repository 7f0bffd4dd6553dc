"""The R2R-VLN-CE instruction vocabulary and tokeniser.

The episode file's ``instruction_vocab.word_list`` is used as-is: list index = token id,
0 = ``<pad>``, 1 = ``<unk>``. It is never re-ordered or prefixed (the official wrapper
would prepend an UNK entry if one were missing and shift every id, SPEC §1.2).

Tokenisation rule (reproduces all 1839 ``val_unseen`` token lists of R2R-VLN-CE v1-3):
lower-case; put a space before "'s"; delete "," and "?"; split on runs of characters that
are neither word characters nor "-", keeping the separators; strip every piece and drop
the empty ones. Words missing from the vocabulary map to UNK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
PAD_INDEX = 0
UNK_INDEX = 1
#: padded length of ``instruction_tokens`` in the released files
DEFAULT_PADDED_LENGTH = 200

_SPLIT = re.compile(r"([^\w-]+)")
_DELETE = (",", "?")


def split_words(text: str) -> list[str]:
    """Words and punctuation tokens of ``text`` as the official preprocessing makes them."""
    text = text.lower().replace("'s", " 's")
    for ch in _DELETE:
        text = text.replace(ch, "")
    return [piece.strip() for piece in _SPLIT.split(text) if piece.strip()]


def text_prefix(text: str, n: int) -> str:
    """The shortest prefix of ``text`` whose words are exactly the first ``n`` words of ``text``.

    Cutting an instruction at a word boundary keeps its original spelling and punctuation
    (behavioural probes append to the cut text). Raises ``ValueError`` when no prefix
    tokenises that way.
    """
    words = split_words(text)
    if not 0 <= n <= len(words):
        raise ValueError(f"cannot keep {n} words of a {len(words)}-word text")
    if n == 0:
        return ""
    lo, hi = 1, len(text)
    while lo < hi:  # the word count of a prefix never falls as the prefix grows
        mid = (lo + hi) // 2
        if len(split_words(text[:mid])) >= n:
            hi = mid
        else:
            lo = mid + 1
    for cut in range(lo, len(text) + 1):  # the n-th word may still be partial at ``lo``
        got = split_words(text[:cut])
        if got == words[:n]:
            return text[:cut]
        if len(got) > n:
            break
    raise ValueError(f"no prefix of the text tokenises to exactly its first {n} words")


@dataclass
class Vocabulary:
    """Token ids <-> words, backed by the file's ``word_list`` (index = id)."""

    words: list[str]
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.words) < 2 or self.words[PAD_INDEX] != PAD_TOKEN or self.words[UNK_INDEX] != UNK_TOKEN:
            head = self.words[:2]
            raise ValueError(
                f"word_list must start with ['{PAD_TOKEN}', '{UNK_TOKEN}'], got {head}"
            )
        self._index = {}
        for i, w in enumerate(self.words):
            self._index.setdefault(w, i)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def index(self, word: str) -> int:
        return self._index.get(word, UNK_INDEX)

    def encode(self, text: str, padded_length: int | None = DEFAULT_PADDED_LENGTH) -> list[int]:
        """Token ids of ``text``, zero-padded (or truncated) to ``padded_length``."""
        ids = [self.index(w) for w in split_words(text)]
        if padded_length is None:
            return ids
        return (ids + [PAD_INDEX] * padded_length)[:padded_length]

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Words of the non-padding ids."""
        return [self.words[i] for i in ids if i != PAD_INDEX]

    @classmethod
    def build(cls, texts: Sequence[str], min_count: int = 1) -> "Vocabulary":
        """A vocabulary over ``texts`` (pad, unk, then words in sorted order, like R2R's)."""
        counts: dict[str, int] = {}
        for text in texts:
            for w in split_words(text):
                counts[w] = counts.get(w, 0) + 1
        words = sorted(w for w, c in counts.items() if c >= min_count and w not in (PAD_TOKEN, UNK_TOKEN))
        return cls([PAD_TOKEN, UNK_TOKEN, *words])

    def to_instruction_vocab(self) -> dict:
        """The ``instruction_vocab`` object in the layout of the released files."""
        index = {w: i for i, w in enumerate(self.words)}
        return {
            "word_list": list(self.words),
            "word2idx_dict": index,
            "stoi": dict(index),
            "itos": list(self.words),
            "num_vocab": len(self.words),
            "UNK_INDEX": UNK_INDEX,
            "PAD_INDEX": PAD_INDEX,
        }
