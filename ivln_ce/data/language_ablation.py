"""Language ablations at evaluation (Jain et al. 2019, §5): how much does the agent use the words?

An agent trained on full instructions is evaluated with ``eval.instruction`` set to

* ``full``: the instruction as in the file (no ablation);
* ``last:K``: only the last K tokens (the paper uses K = 5), moved to the front and padded;
* ``none``: no instruction at all, every id is padding (vision and everything else are kept);
* ``other``: the instruction of an arbitrary episode of *another* path of the same split,
  drawn with a seeded generator; the reference path, start and goal stay the episode's own.
  This keeps the length distribution of real instructions, unlike ``none``.

The ablation rewrites the episodes' ``instruction_tokens`` (and text) before the tour
environments are built, which is where every observation's ``instruction`` comes from, so
every policy sees it whether it runs in the main process or inside the workers. Results of an
ablated run are analysis-only.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from ivln_ce.config import INSTRUCTION_ABLATION_PATTERN
from ivln_ce.data.episodes import EpisodeDataset
from ivln_ce.data.vocab import PAD_INDEX

EXPECTED = "one of full, last:K (keep the last K >= 1 tokens), none (all padding), other (another path's instruction)"


@dataclass(frozen=True)
class InstructionAblation:
    mode: str = "full"
    #: tokens kept from the end (``last`` only)
    k: int | None = None

    @classmethod
    def parse(cls, text: str) -> "InstructionAblation":
        """``full`` / ``last:K`` / ``none`` / ``other``; anything else is a ValueError saying so."""
        value = str(text).strip()
        if not re.fullmatch(INSTRUCTION_ABLATION_PATTERN, value):
            raise ValueError(f"eval.instruction must be {EXPECTED}; got {text!r}")
        if value.startswith("last:"):
            return cls("last", int(value.split(":", 1)[1]))
        return cls(value)

    def __str__(self) -> str:
        return f"last:{self.k}" if self.mode == "last" else self.mode

    @property
    def ablated(self) -> bool:
        return self.mode != "full"


def last_tokens(tokens: list[int], k: int) -> list[int]:
    """The last ``k`` non-padding ids, at the front, padded to the same length."""
    n = sum(1 for t in tokens if t != PAD_INDEX)  # padding is trailing (validated on load)
    kept = tokens[max(0, n - k):n]
    return kept + [PAD_INDEX] * (len(tokens) - len(kept))


def no_tokens(tokens: list[int]) -> list[int]:
    return [PAD_INDEX] * len(tokens)


@dataclass
class AblatedSplit:
    dataset: EpisodeDataset
    #: ``other``: episode id -> the episode whose instruction it now carries
    donors: dict[str, str]
    #: episodes whose token list changed
    changed: int


def ablate_instructions(dataset: EpisodeDataset, ablation: InstructionAblation, seed: int = 0) -> AblatedSplit:
    """A copy of ``dataset`` whose instructions are ablated (``full``: the dataset itself).

    ``other`` walks the episodes in file order with one generator seeded by ``seed`` and draws,
    for each, a uniform episode of a different ``trajectory_id``: the same file and seed give the
    same donors whichever tours are evaluated."""
    if not ablation.ablated:
        return AblatedSplit(dataset, {}, 0)
    episodes = dataset.episodes
    vocab = dataset.vocab
    donors: dict[str, str] = {}
    if ablation.mode == "other":
        if len({e.trajectory_id for e in episodes}) < 2:
            raise ValueError(f"eval.instruction=other needs episodes of at least two paths in {dataset.path}; "
                             f"it holds {len({e.trajectory_id for e in episodes})}")
        rng = np.random.default_rng(seed)
        for e in episodes:
            while True:
                d = episodes[int(rng.integers(len(episodes)))]
                if d.trajectory_id != e.trajectory_id:
                    break
            donors[e.episode_id] = d.episode_id
    out, changed = [], 0
    for e in episodes:
        if ablation.mode == "last":
            tokens = last_tokens(e.instruction_tokens, int(ablation.k))
            text = " ".join(vocab.decode(tokens)) if vocab is not None else ""
        elif ablation.mode == "none":
            tokens, text = no_tokens(e.instruction_tokens), ""
        else:
            d = dataset[donors[e.episode_id]]
            tokens, text = list(d.instruction_tokens), d.instruction_text
        changed += tokens != e.instruction_tokens
        # the alignment describes the original words: it does not hold for the ablated ones
        out.append(dataclasses.replace(e, instruction_tokens=tokens, instruction_text=text, alignment=None))
    return AblatedSplit(EpisodeDataset(out, dataset.instruction_vocab, dataset.path), donors, changed)

