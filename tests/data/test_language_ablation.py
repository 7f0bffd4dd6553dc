"""Language ablations (seed 000 §5): the token lists a policy gets for each eval.instruction value."""

import pytest

from ivln_ce.config import ConfigError, load_config
from ivln_ce.data.episodes import Episode, EpisodeDataset, Goal
from ivln_ce.data.language_ablation import InstructionAblation, ablate_instructions, last_tokens, no_tokens
from ivln_ce.data.vocab import Vocabulary

TEXTS = ["walk to the door and stop", "turn left at the sofa", "go up the stairs", "wait by the bed", "exit the room"]
VOCAB = Vocabulary.build(TEXTS)


def dataset(trajectories=(1, 1, 2, 3, 3)) -> EpisodeDataset:
    eps = [Episode(str(i + 1), str(t), "mp3d/s/s.glb", [float(i), 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], {"geodesic_distance": 1.0},
                   [Goal([float(i), 0.0, 1.0], 3.0)], TEXTS[i], VOCAB.encode(TEXTS[i], 10), [[float(i), 0.0, 0.0], [float(i), 0.0, 1.0]])
           for i, t in enumerate(trajectories)]
    return EpisodeDataset(eps, VOCAB.to_instruction_vocab(), "split.json.gz")


@pytest.mark.parametrize("text, expected", [("full", ("full", None)), ("none", ("none", None)), ("other", ("other", None)),
                                            ("last:5", ("last", 5)), (" last:12 ", ("last", 12))])
def test_parse_accepts_the_four_settings(text, expected):
    a = InstructionAblation.parse(text)
    assert (a.mode, a.k) == expected and a.ablated == (a.mode != "full")


@pytest.mark.parametrize("bad", ["last:0", "last:", "last:-2", "last5", "first:3", "None", "", "full,none"])
def test_parse_and_config_refuse_other_values_with_the_choices(bad):
    with pytest.raises(ValueError, match="eval.instruction must be one of full, last:K"):
        InstructionAblation.parse(bad)
    with pytest.raises(ConfigError, match=r"eval\.instruction.*one of full, last:K"):
        load_config(None, [f"eval.instruction='{bad}'"])


def test_last_k_and_none_by_hand():
    assert last_tokens([5, 6, 7, 8, 0, 0], 2) == [7, 8, 0, 0, 0, 0]
    assert last_tokens([5, 6, 7, 8, 0, 0], 4) == [5, 6, 7, 8, 0, 0]
    assert last_tokens([5, 6, 7, 8, 0, 0], 9) == [5, 6, 7, 8, 0, 0]
    assert last_tokens([5, 6, 7, 8], 1) == [8, 0, 0, 0]
    assert no_tokens([5, 6, 0]) == [0, 0, 0]


def test_ablated_datasets_keep_everything_but_the_instruction():
    ds = dataset()
    full = ablate_instructions(ds, InstructionAblation.parse("full"))
    assert full.dataset is ds and full.changed == 0
    last = ablate_instructions(ds, InstructionAblation.parse("last:2")).dataset
    assert last.episodes[0].instruction_tokens == VOCAB.encode("and stop", 10)
    assert last.episodes[0].instruction_text == "and stop"
    none = ablate_instructions(ds, InstructionAblation.parse("none"))
    assert {tuple(e.instruction_tokens) for e in none.dataset} == {(0,) * 10} and none.changed == 5
    for a, b in zip(ds, none.dataset):
        assert (a.episode_id, a.start_position, a.goal_position, a.reference_path) == (b.episode_id, b.start_position, b.goal_position, b.reference_path)
    assert ds.episodes[0].instruction_tokens == VOCAB.encode(TEXTS[0], 10)  # the input is not modified


def test_other_draws_a_seeded_instruction_of_another_path():
    ds = dataset()
    a = ablate_instructions(ds, InstructionAblation.parse("other"), seed=7)
    b = ablate_instructions(ds, InstructionAblation.parse("other"), seed=7)
    assert a.donors == b.donors and set(a.donors) == {e.episode_id for e in ds}
    for e in a.dataset:
        donor = ds[a.donors[e.episode_id]]
        assert donor.trajectory_id != ds[e.episode_id].trajectory_id
        assert (e.instruction_tokens, e.instruction_text) == (donor.instruction_tokens, donor.instruction_text)
        assert e.reference_path == ds[e.episode_id].reference_path
    assert len({tuple(sorted(ablate_instructions(ds, InstructionAblation.parse("other"), seed=s).donors.items())) for s in range(8)}) > 1
    with pytest.raises(ValueError, match="at least two paths in split.json.gz"):
        ablate_instructions(dataset((4, 4, 4, 4, 4)), InstructionAblation.parse("other"))
