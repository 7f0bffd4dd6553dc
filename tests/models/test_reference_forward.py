"""An independent forward pass of MAP-CMA and CMA, written here from the official formulas
(SPEC §8.1, §8.2, §8.6) with ``torch.nn.functional`` ops straight on the state dict (no model
class is used), against the models on random weights and inputs: logits and progress agree.

In particular the spatial embedding enters as the official ``emb(arange(16)).view(1, -1, 4, 4)``:
the (16, 64) table's memory read as (64, 16), not its transpose."""

import pytest

torch = pytest.importorskip("torch", reason="the models need torch")
F = torch.nn.functional

from ivln_ce.models.cma import CMAPolicy, PolicyState  # noqa: E402
from ivln_ce.models.map_cma import MapCMAPolicy  # noqa: E402

VOCAB = 30


def random_state(model, seed):
    """Random values for every parameter and buffer (scaled so nothing saturates); BatchNorm
    variances positive; the padding row of the word table zero, as in the GloVe file."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked") or k == "net._scale":
            out[k] = v.clone()
        elif k.endswith("running_var"):
            out[k] = torch.rand(v.shape, generator=g) + 0.5
        else:
            fan = v[0].numel() if v.dim() > 1 else 4
            out[k] = torch.randn(v.shape, generator=g) / fan**0.5
    out["net.instruction_encoder.embedding_layer.weight"][0] = 0
    return out


# --------------------------------------------------------------------------- reference


def lstm_direction(xs, sd, sfx, H=128):
    h, c, outs = torch.zeros(H), torch.zeros(H), []
    W_ih, W_hh = sd[f"net.instruction_encoder.encoder_rnn.weight_ih_l0{sfx}"], sd[f"net.instruction_encoder.encoder_rnn.weight_hh_l0{sfx}"]
    b = sd[f"net.instruction_encoder.encoder_rnn.bias_ih_l0{sfx}"] + sd[f"net.instruction_encoder.encoder_rnn.bias_hh_l0{sfx}"]
    for x in xs:
        i, f, gg, o = (F.linear(x, W_ih) + F.linear(h, W_hh) + b).chunk(4)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return outs


def instruction(tokens, sd):
    """Per sequence: only the positions with a non-zero embedding row are run (packed), forward
    and reversed; output (N, 256, L_max) zero-padded and a validity mask."""
    emb = F.embedding(tokens, sd["net.instruction_encoder.embedding_layer.weight"])
    lengths = [int((e.abs().sum(1) != 0).sum()) for e in emb]
    L = max(lengths)
    feats, mask = torch.zeros(len(tokens), 256, L), torch.zeros(len(tokens), L, dtype=torch.bool)
    for n, (e, length) in enumerate(zip(emb, lengths)):
        fwd = lstm_direction(e[:length], sd, "")
        bwd = lstm_direction(e[:length].flip(0), sd, "_reverse")[::-1]
        for t in range(length):
            feats[n, :, t] = torch.cat([fwd[t], bwd[t]])
        mask[n, :length] = True
    return feats, mask


def gru(x, h, sd, prefix):
    r_i, z_i, n_i = F.linear(x, sd[f"{prefix}.weight_ih_l0"], sd[f"{prefix}.bias_ih_l0"]).chunk(3, dim=1)
    r_h, z_h, n_h = F.linear(h, sd[f"{prefix}.weight_hh_l0"], sd[f"{prefix}.bias_hh_l0"]).chunk(3, dim=1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    n = torch.tanh(n_i + r * n_h)
    return (1 - z) * n + z * h


def attn(q, k, v, mask=None):
    logits = torch.einsum("nd,nds->ns", q, k)
    if mask is not None:
        logits = logits.masked_fill(~mask, -1e8)
    return torch.einsum("ns,nes->ne", torch.softmax(logits / 16.0, dim=1), v)


def with_spatial(features, table):
    """features (N, C, 4, 4) -> (N, C + 64, 16), spatial part = table.view(1, -1, 4, 4)."""
    n = features.shape[0]
    spatial = table.view(1, -1, 4, 4).expand(n, -1, 4, 4)
    return torch.cat([features, spatial], dim=1).flatten(2)


def map_encoder(maps, sd):
    x = maps
    for i in range(4):
        p = f"net.map_encoder.cnn.{i}.conv"
        x = F.conv2d(x, sd[f"{p}.0.weight"], sd[f"{p}.0.bias"], padding=3)
        x = F.batch_norm(x, sd[f"{p}.1.running_mean"], sd[f"{p}.1.running_var"], sd[f"{p}.1.weight"], sd[f"{p}.1.bias"], training=False, eps=1e-5)
        x = F.avg_pool2d(F.relu(x), 2)
    return x.flatten(2)  # (N, 128, 16), no spatial embedding


def reference_step(kind, sd, obs, instr, instr_mask, prev_action, agent_mask, h1, h2):
    lin = lambda x, name: F.linear(x, sd[f"{name}.weight"], sd[f"{name}.bias"])  # noqa: E731
    kv = lambda x, name: F.conv1d(x, sd[f"{name}.weight"], sd[f"{name}.bias"])  # noqa: E731
    depth = with_spatial(obs["depth_features"], sd["net.depth_encoder.spatial_embeddings.weight"])  # (N, 192, 16)
    depth_in = F.relu(lin(depth.flatten(1), "net.depth_linear.1"))
    prev = F.embedding(((prev_action + 1) * agent_mask.long()), sd["net.prev_action_embedding.weight"])
    if kind == "mapcma":
        onehot = F.one_hot(obs["semantic_map"].long(), 13).permute(0, 3, 1, 2).float()
        vis = map_encoder(torch.cat([obs["occupancy_map"].float()[:, None], onehot], dim=1), sd)
        first = [depth_in, F.relu(lin(vis.flatten(1), "net.map_linear.1"))]
    else:
        vis = with_spatial(obs["rgb_features"], sd["net.rgb_encoder.spatial_embeddings.weight"])  # (N, 2112, 16)
        first = [F.relu(lin(vis.mean(dim=2), "net.rgb_linear.2")), depth_in]
    m = agent_mask.float()[:, None]
    h1 = gru(torch.cat(first + [prev], dim=1), h1 * m, sd, "net.state_encoder.rnn")
    text = attn(lin(h1, "net.state_q"), kv(instr, "net.text_k"), instr, instr_mask)
    q2 = lin(text, "net.text_q")
    if kind == "mapcma":
        dk, dv = kv(depth, "net.dep_kv").split([256, 128], dim=1)
        mk, mv = kv(vis, "net.map_kv").split([256, 256], dim=1)
        att = [attn(q2, dk, dv), attn(q2, mk, mv)]
    else:
        rk, rv = kv(vis, "net.rgb_kv").split([256, 256], dim=1)
        dk, dv = kv(depth, "net.depth_kv").split([256, 128], dim=1)
        att = [attn(q2, rk, rv), attn(q2, dk, dv)]
    x = F.relu(lin(torch.cat([h1, text, *att, prev], dim=1), "net.second_state_compress.0"))
    h2 = gru(x, h2 * m, sd, "net.second_state_encoder.rnn")
    return lin(h2, "action_distribution.linear"), torch.tanh(lin(h2, "net.progress_monitor")).squeeze(1), h1, h2


def observations(kind, n, g):
    lengths = torch.randint(2, 9, (n,), generator=g)
    tokens = torch.randint(1, VOCAB, (n, 12), generator=g) * (torch.arange(12)[None] < lengths[:, None])
    obs = {"instruction": tokens, "depth_features": torch.rand(n, 128, 4, 4, generator=g)}
    if kind == "mapcma":
        obs["occupancy_map"] = torch.randint(0, 2, (n, 64, 64), generator=g).to(torch.uint8)
        obs["semantic_map"] = torch.randint(0, 13, (n, 64, 64), generator=g).to(torch.uint8)
    else:
        obs["rgb_features"] = torch.rand(n, 2048, 4, 4, generator=g) * 2
    return obs


@pytest.mark.parametrize("kind", ["mapcma", "cma"])
def test_model_matches_an_independent_forward_of_the_official_formulas(kind):
    policy = MapCMAPolicy(vocab_size=VOCAB, depth_backbone="small") if kind == "mapcma" else CMAPolicy("cma", VOCAB, depth_backbone="small")
    sd = random_state(policy, seed=1)
    policy.load_state_dict(sd)
    policy.eval()
    g = torch.Generator().manual_seed(2)
    N, T = 3, 4
    steps = [observations(kind, N, g) for _ in range(T)]
    for o in steps[1:]:
        o["instruction"] = steps[0]["instruction"]  # one instruction per stream
    episode_start = torch.zeros(T, N, dtype=torch.bool)
    episode_start[0] = True
    episode_start[2, 2] = True  # stream c: agent mask 0 at t = 2 (an oracle step)
    executed = torch.randint(0, 4, (T, N), generator=g)  # the actions the environments ran (e.g. an expert's)
    prev = torch.cat([torch.full((1, N), -1), executed[:-1]])

    instr, instr_mask = instruction(steps[0]["instruction"], sd)
    h1, h2 = torch.zeros(N, 512), torch.zeros(N, 512)
    ref_logits, ref_progress = [], []
    with torch.no_grad():
        for t in range(T):
            lg, pr, h1, h2 = reference_step(kind, sd, steps[t], instr, instr_mask, prev[t], ~episode_start[t], h1, h2)
            ref_logits.append(lg)
            ref_progress.append(pr)
    ref_logits, ref_progress = torch.stack(ref_logits), torch.stack(ref_progress)
    assert ref_logits.std() > 1e-3 and ref_progress.std() > 1e-3  # not a degenerate comparison

    # the training path: logits and progress for the whole sequence
    obs = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
    tour_mask = torch.ones(T, N)
    tour_mask[0] = 0
    with torch.no_grad():
        logits, progress, _ = policy.forward_sequence(obs, prev, (~episode_start).float(), tour_mask)
    assert (logits - ref_logits).abs().max() < 1e-5 and (progress - ref_progress).abs().max() < 1e-5

    # the rollout path: act, then the executed actions recorded
    state, ids = PolicyState(), ["a", "b", "c"]
    for t in range(T):
        actions, progress_t, state = policy.act(steps[t], state, ids, episode_start[t], tour_mask[t] == 0)
        assert (progress_t - ref_progress[t]).abs().max() < 1e-5
        assert torch.equal(actions, ref_logits[t].argmax(1))
        state.record_actions(ids, executed[t])
