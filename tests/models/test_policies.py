import gzip
import json

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")

from ivln_ce.models.cma import HIDDEN, CMAPolicy, PolicyState, StepInputs  # noqa: E402
from ivln_ce.models.encoders import InstructionEncoder, load_glove  # noqa: E402
from ivln_ce.models.losses import action_loss, inflection_weights, progress_monitor_loss  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402

torch.manual_seed(0)


def make(kind, **kw):
    if kind == "mapcma":
        return MapCMAPolicy(depth_backbone="small", vocab_size=50, **kw).eval()
    return CMAPolicy(variant=kind, depth_backbone="small", vocab_size=50, **kw).eval()


def observations(kind, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 12, (n,), generator=g)
    tokens = torch.randint(1, 50, (n, 20), generator=g) * (torch.arange(20)[None] < lengths[:, None])
    obs = {"instruction": tokens, "depth_features": torch.rand(n, 128, 4, 4, generator=g)}
    if kind == "mapcma":
        obs["occupancy_map"] = torch.randint(0, 2, (n, 64, 64), generator=g)
        obs["semantic_map"] = torch.randint(0, 13, (n, 64, 64), generator=g)
    else:
        obs["rgb_features"] = torch.rand(n, 2048, 4, 4, generator=g)
    return obs


def take(obs, idx):
    return {k: v[idx] for k, v in obs.items()}


KINDS = ["cma", "tourcma", "poolcma", "poolendcma", "mapcma"]


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_with_mixed_signals(kind):
    p = make(kind)
    state = PolicyState()
    ids = ["a", "b", "c", "d"]
    obs = observations(kind, 4)
    a, prog, state = p.act(obs, state, ids, torch.tensor([1, 1, 0, 1]).bool(), torch.tensor([1, 0, 0, 1]).bool())
    assert a.shape == (4,) and prog.shape == (4,) and a.dtype == torch.long
    assert all(state.hidden[s].shape == (p.num_recurrent_layers, HIDDEN) for s in ids)
    assert p.num_recurrent_layers == (3 if kind in ("poolcma", "poolendcma") else 2)
    assert torch.all(prog.abs() <= 1)


def _step_h(p, obs, h, episode_start, tour_start):
    instr, mask = p.net.instruction_encoder(obs["instruction"])
    x = StepInputs(instr, mask, torch.zeros(len(h), dtype=torch.long), (~episode_start).float(), (~tour_start).float(), p.net.encode_visual(obs))
    return p.net.step(x, h)[2]


@pytest.mark.parametrize("kind", KINDS)
def test_memory_resets_follow_the_table(kind):
    p = make(kind)
    obs = observations(kind, 1)
    h = torch.randn(1, p.num_recurrent_layers, HIDDEN).abs()
    gru_zero = h.clone()
    gru_zero[:, :2] = 0  # both GRU slots zero; a PoolCMA tour memory M is kept
    t, f = torch.tensor([True]), torch.tensor([False])
    new_episode = _step_h(p, obs, h, t, f)
    fresh = _step_h(p, obs, gru_zero, t, f)
    new_tour = _step_h(p, obs, h, t, t)
    fresh_tour = _step_h(p, obs, torch.zeros_like(h), t, t)
    keeps_across_episodes = kind == "tourcma"
    for slot in (0, 1):
        same = torch.allclose(new_episode[:, slot], fresh[:, slot], atol=1e-6)
        assert same != keeps_across_episodes, (kind, slot)
        assert torch.allclose(new_tour[:, slot], fresh_tour[:, slot], atol=1e-6)  # every GRU resets at a tour start
    if kind in ("poolcma", "poolendcma"):
        # M: running max over the tour, kept across episodes, zeroed at a tour start
        assert torch.allclose(new_episode[:, 2], torch.maximum(h[:, 2], new_episode[:, 0]))
        assert torch.allclose(new_tour[:, 2], torch.clamp(new_tour[:, 0], min=0))


def test_paper_tourcma_resets_only_the_second_gru_per_episode():
    p = make("tourcma", reset_state_gru_per_episode=True)
    obs = observations("tourcma", 1)
    h = torch.randn(1, 2, HIDDEN)
    t, f = torch.tensor([True]), torch.tensor([False])
    a, b = _step_h(p, obs, h, t, f), _step_h(p, obs, torch.zeros_like(h), t, f)
    assert not torch.allclose(a[:, 0], b[:, 0]) and not torch.allclose(a[:, 1], b[:, 1])
    h1_same = h.clone()
    # the second GRU started from zero: with equal h1 input, h2 equals the fresh h2
    h1_same[:, 1] = 0
    c = _step_h(p, obs, h1_same, t, f)
    assert torch.allclose(a[:, 1], c[:, 1], atol=1e-6)


@pytest.mark.parametrize("kind", ["cma", "tourcma", "poolendcma", "mapcma"])
def test_sequence_forward_equals_step_by_step_act(kind):
    p = make(kind)
    T, N = 6, 3
    seq = [observations(kind, N, seed=t) for t in range(T)]
    for t in range(1, T):
        seq[t]["instruction"] = seq[0]["instruction"]  # one episode per stream
    episode_start = torch.zeros(T, N, dtype=torch.bool)
    episode_start[0] = True
    episode_start[3, 1] = True  # an oracle step in stream 1: agent mask 0
    tour_start = torch.zeros(T, N, dtype=torch.bool)
    tour_start[0] = True
    state = PolicyState()
    ids = ["x", "y", "z"]
    acts, progs = [], []
    for t in range(T):
        a, pr, state = p.act(seq[t], state, ids, episode_start[t], tour_start[t])
        state.record_actions(ids, a)  # the policy's own actions were executed (beta = 0)
        acts.append(a)
        progs.append(pr)
    # the same inputs through the training path (agent mask 0 at t=0 and at the oracle step)
    agent_mask = (~episode_start).float()
    obs = {k: torch.stack([s[k] for s in seq]) for k in seq[0]}
    prev = torch.stack([torch.full((N,), -1)] + acts[:-1])
    with torch.no_grad():
        logits, progress, _ = p.forward_sequence(obs, prev, agent_mask, (~tour_start).float())
    assert torch.allclose(progress, torch.stack(progs), atol=1e-5)
    assert torch.equal(logits.argmax(-1), torch.stack(acts))


@pytest.mark.parametrize("kind", ["cma", "mapcma"])
def test_the_previous_action_is_the_executed_one_recorded_by_the_caller(kind):
    """Under DAgger (beta < 1) the executed action is often the expert's: ``act`` must not
    record its own choice; the next step's previous-action input is what ``record_actions``
    stored, and it matters (agent mask 1) exactly as the training path says."""
    p = make(kind)
    ids = ["a", "b"]
    o0, o1 = observations(kind, 2, seed=0), observations(kind, 2, seed=1)
    o1["instruction"] = o0["instruction"]
    start, cont = torch.tensor([True, True]), torch.tensor([False, False])
    a0, _, state = p.act(o0, PolicyState(), ids, start, start)
    assert state.prev_action == {}  # act records nothing
    results = {}
    for label, executed in (("policy", a0), ("expert", (a0 + 1) % 4)):
        s = PolicyState()
        p.act(o0, s, ids, start, start)
        s.record_actions(ids, executed)
        assert s.prev_action == {"a": int(executed[0]), "b": int(executed[1])}
        _, prog, _ = p.act(o1, s, ids, cont, cont)
        obs = {k: torch.stack([o0[k], o1[k]]) for k in o0}
        prev = torch.stack([torch.full((2,), -1), executed])
        agent = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
        with torch.no_grad():
            _, want, _ = p.forward_sequence(obs, prev, agent, agent)
        assert torch.allclose(prog, want[1], atol=1e-6), label
        results[label] = prog
    assert not torch.allclose(results["policy"], results["expert"])
    with pytest.raises(ValueError, match="2 stream ids but 1 actions"):
        state.record_actions(ids, torch.tensor([1]))
    with pytest.raises(ValueError, match="action 7"):
        state.record_actions(ids, [1, 7])


def test_constructors_take_explicit_keywords_only():
    from ivln_ce.models.map_cma import MapCMANet

    with pytest.raises(TypeError, match="vocab_sise"):
        MapCMAPolicy(vocab_sise=50)  # a typo is an error, not a silently ignored option
    with pytest.raises(TypeError):
        MapCMANet(depth_backbone="small", reset_state_gru_per_episode=True)
    with pytest.raises(TypeError):
        CMAPolicy("tourcma", 50, None, "small", 18, True)  # the switches are keyword-only
    p = CMAPolicy("tourcma", 50, None, "small", 18, reset_state_gru_per_episode=True, bn_train_mode=True, pm_broadcast_bug=True)
    assert p.net.reset_state_gru_per_episode and p.net.rgb_encoder.bn_train_mode and p.pm_broadcast_bug
    m = MapCMAPolicy(50, depth_backbone="small", bn_train_mode=True)
    assert m.bn_train_mode and not m.pm_broadcast_bug


def test_state_is_keyed_by_stream_not_batch_slot():
    p = make("poolcma")
    ids = ["a", "b", "c"]
    s1, s2 = PolicyState(), PolicyState()
    for t in range(4):
        obs = observations("poolcma", 3, seed=t)
        if t:
            obs["instruction"] = observations("poolcma", 3, seed=0)["instruction"]
        start = torch.tensor([t == 0] * 3)
        a1, pr1, s1 = p.act(obs, s1, ids, start, start)
        perm = [2, 0, 1]
        a2, pr2, s2 = p.act(take(obs, perm), s2, [ids[i] for i in perm], start[perm], start[perm])
        assert torch.equal(a1[perm], a2) and torch.allclose(pr1[perm], pr2, atol=1e-6)
    # pausing a stream (dropping it from the batch) does not disturb the others
    a3, pr3, _ = p.act(take(obs, [0, 2]), s1, ["a", "c"], torch.tensor([False, False]), torch.tensor([False, False]))
    assert s1.hidden.keys() == {"a", "b", "c"}


def test_instruction_is_encoded_once_per_episode_and_padding_is_zero():
    p = make("cma")
    state = PolicyState()
    ids = ["a", "b"]
    for t in range(5):
        start = torch.tensor([t == 0, t in (0, 3)])
        p.act(observations("cma", 2, seed=0), state, ids, start, torch.tensor([t == 0] * 2))
    assert state.encodings == 3  # two at t=0, one new episode of stream b at t=3
    enc = InstructionEncoder(vocab_size=50)
    tokens = torch.tensor([[5, 6, 7, 0, 0], [5, 0, 0, 0, 0]])
    feats, mask = enc(tokens)
    assert feats.shape == (2, 256, 3) and mask.tolist() == [[True, True, True], [True, False, False]]
    assert torch.all(feats[1, :, 1:] == 0)


def test_glove_file_loads(tmp_path):
    rows = [[0.0] * 50] + [[float(i + j) / 100 for j in range(50)] for i in range(1, 4)]
    path = tmp_path / "embeddings.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(rows, fh)
    table = load_glove(path)
    assert table.shape == (4, 50)
    enc = InstructionEncoder(vocab_size=4, embeddings=table)
    assert torch.equal(enc.embedding_layer.weight, table) and not enc.embedding_layer.weight.requires_grad
    assert InstructionEncoder(vocab_size=4).embedding_layer.weight.requires_grad  # no GloVe: learned, as officially
    assert InstructionEncoder(vocab_size=4, embeddings=table, fine_tune=True).embedding_layer.weight.requires_grad
    rows[2] = [0.0] * 50
    with gzip.open(path, "wt") as fh:
        json.dump(rows, fh)
    with pytest.raises(ValueError, match="all zeros"):
        load_glove(path)


def test_progress_monitor_loss_fixed_and_official():
    pred = torch.tensor([0.1, 0.5, 0.9, 0.3])
    target = torch.tensor([[0.0], [0.5], [1.0], [1.0]])
    valid = torch.tensor([True, True, True, False])
    fixed = progress_monitor_loss(pred, target, valid)
    assert fixed.item() == pytest.approx(((0.1 - 0) ** 2 + 0 + (0.9 - 1) ** 2) / 3)
    official = progress_monitor_loss(pred, target, valid, official_broadcast=True)
    want = sum((pred[j] - target[i, 0]) ** 2 for j in range(3) for i in range(4)) / 12
    assert official.item() == pytest.approx(float(want))
    assert official.item() > fixed.item()


def test_inflection_weighted_action_loss():
    actions = torch.tensor([[1, 1], [1, 2], [2, 2], [0, 0]])
    valid = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]]).bool()
    w = inflection_weights(actions, valid)
    assert w[:, 0].tolist() == pytest.approx([3.2, 1.0, 3.2, 3.2]) and w[:, 1].tolist() == pytest.approx([3.2, 3.2, 1.0, 0.0])
    logits = torch.zeros(4, 2, 4)
    assert action_loss(logits, actions, w).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())


def test_rednet_segmenter_takes_any_frame_size():
    from ivln_ce.models.rednet import RedNet, RedNetSegmenter

    seg = RedNetSegmenter(RedNet(depth=18))
    for h, w in ((48, 48), (64, 96), (50, 70)):
        out = seg(torch.randint(0, 255, (2, h, w, 3), dtype=torch.uint8), torch.rand(2, h, w, 1))
        assert out.shape == (2, h, w) and out.dtype == torch.uint8 and int(out.max()) <= 12


def test_the_carried_state_is_each_episodes_true_last_step_unless_t2_is_reproduced():
    """``forward_sequence(lengths=...)`` returns each column's state after its own last step,
    equal to running that episode alone, unpadded; without ``lengths`` (T2, the official
    padded-state carry) a short episode's state has also run through its padding."""
    p = make("tourcma")
    T, N = 5, 2
    seq = [observations("tourcma", N, seed=t) for t in range(T)]
    for t in range(1, T):
        seq[t]["instruction"] = seq[0]["instruction"]
    obs = {k: torch.stack([s[k] for s in seq]) for k in seq[0]}
    prev = torch.randint(0, 4, (T, N), generator=torch.Generator().manual_seed(3))
    prev[0] = -1
    agent = torch.ones(T, N)
    agent[0] = 0.0
    tour = torch.ones(T, N)
    tour[0] = 0.0
    h0 = torch.rand(N, p.num_recurrent_layers, 512, generator=torch.Generator().manual_seed(4))
    lengths = torch.tensor([3, 5])
    with torch.no_grad():
        _, _, h_true = p.forward_sequence(obs, prev, agent, tour, h0, lengths=lengths)
        _, _, h_padded = p.forward_sequence(obs, prev, agent, tour, h0)
        short = {k: (v[:, :1] if k == "instruction" else v[:3, :1]) for k, v in obs.items()}
        _, _, h_alone = p.forward_sequence(short, prev[:3, :1], agent[:3, :1], tour[:3, :1], h0[:1])
    assert torch.allclose(h_true[0], h_alone[0], atol=1e-6)
    assert torch.equal(h_true[1], h_padded[1])  # the full-length column: both the same
    assert not torch.allclose(h_true[0], h_padded[0], atol=1e-3)


@pytest.mark.parametrize("glove, mode, trains", [(False, "auto", True), (True, "auto", False), (False, "freeze", False),
                                                 (True, "learn", True), (False, "learn", True), (True, "freeze", False)])
def test_policy_embedding_training_switch(tmp_path, glove, mode, trains):
    """policy.embedding_training: auto learns a random table and keeps GloVe frozen (official);
    learn / freeze force either. The trainer optimises exactly the parameters that require grad."""
    from ivln_ce.config import load_config
    from ivln_ce.models.factory import build_policy

    rows = [[0.0] * 50] + [[float(i + j) / 100 for j in range(50)] for i in range(1, 6)]
    path = tmp_path / "embeddings.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(rows, fh)
    over = ["policy.name=cma", "policy.depth_backbone=small", "policy.rgb_depth=18", f"policy.embedding_training={mode}"]
    cfg = load_config(None, over + ([f"policy.embeddings={path}"] if glove else []))
    policy, _ = build_policy(cfg.policy, 6, cfg.train)
    assert policy.net.instruction_encoder.embedding_layer.weight.requires_grad is trains
