"""A tiny transformers model (Llama: GQA, rotary, causal) with tileattn as its attention: over
20 optimizer steps its losses follow the float64 run as closely as the sdpa path's do
(|loss - loss_fp64| <= 2 |loss_sdpa - loss_fp64| + atol at every step); on a padded batch its
logits follow float64 by the same rule and it trains; greedy generation with left padding and
transformers' cache agrees with sdpa's tokens as often as eager does; packed rows (padding-free
batches, by position_ids or cu_seq_lens) give each sequence's logits and gradients as if it ran
alone. CPU; skipped without torch or transformers."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tileattn.integrations.transformers as tileattn_hf  # noqa: E402

tileattn_hf.register()


def train(attn_implementation, dtype, steps=20):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    config._attn_implementation = attn_implementation
    model = transformers.LlamaForCausalLM(config).to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # A fixed batch whose second half repeats its first: the model learns to copy (the loss falls).
    half = torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(1))
    tokens = torch.cat([half, half], dim=1)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_training_losses_follow_float64_as_sdpa_does(dtype, atol):
    truth = train("sdpa", torch.float64)
    sdpa, ours = train("sdpa", dtype), train("tileattn", dtype)
    assert truth[-1] < truth[0] - 0.5  # it learns (the comparison is not of flat curves)
    for step, (t, s, o) in enumerate(zip(truth, sdpa, ours)):
        assert abs(o - t) <= 2 * abs(s - t) + atol, (step, o, s, t)
    print(f"{dtype}: final loss fp64 {truth[-1]:.5f} sdpa {sdpa[-1]:.5f} tileattn {ours[-1]:.5f}")


def tiny_llama(attn_implementation, dtype=torch.float32):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      pad_token_id=0)
    config._attn_implementation = attn_implementation
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


def padded_batch():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(1, 96, (3, 21), generator=g)
    mask = torch.ones(3, 21, dtype=torch.long)
    mask[1, 13:] = 0  # right padding
    mask[2, :9] = 0  # left padding
    return tokens.masked_fill(mask == 0, 0), mask


def test_padded_batch_logits_follow_float64_as_sdpa_does():
    tokens, mask = padded_batch()
    with torch.no_grad():
        truth = tiny_llama("sdpa", torch.float64)(input_ids=tokens, attention_mask=mask).logits
        sdpa = tiny_llama("sdpa")(input_ids=tokens, attention_mask=mask).logits
        ours = tiny_llama("tileattn")(input_ids=tokens, attention_mask=mask).logits
    valid = mask.bool()
    err, err_sdpa = ((x.double() - truth)[valid].abs().max().item() for x in (ours, sdpa))
    assert err <= 2 * err_sdpa + 1e-5, (err, err_sdpa)


def test_generation_with_left_padding_agrees_with_sdpa_as_eager_does():
    tokens, mask = padded_batch()
    tokens, mask = tokens[[0, 2]], mask[[0, 2]]  # left padding only, as generation pads
    runs = {}
    for attn in ("sdpa", "eager", "tileattn"):
        runs[attn] = tiny_llama(attn).generate(input_ids=tokens, attention_mask=mask, max_new_tokens=12,
                                               do_sample=False)[:, tokens.shape[1]:]
    agree = lambda a, b: (runs[a] == runs[b]).float().mean().item()
    assert agree("tileattn", "sdpa") >= agree("eager", "sdpa"), runs


def test_padded_batch_trains():
    tokens, mask = padded_batch()
    model = tiny_llama("tileattn").train()
    labels = tokens.masked_fill(mask == 0, -100)
    model(input_ids=tokens, attention_mask=mask, labels=labels).loss.backward()
    assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters() if p.requires_grad)


def packed_pair():
    """Two sequences (7 and 11 tokens) as one row, position_ids restarting at 0, and their cu_seqlens."""
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(1, 96, (1, n), generator=g) for n in (7, 11)]
    pos = torch.cat([torch.arange(s.shape[1]) for s in seqs])[None]
    return seqs, torch.cat(seqs, dim=1), pos, torch.tensor([0, 7, 18], dtype=torch.int32)


@pytest.mark.parametrize("how", ["position_ids", "cu_seq_lens"])
def test_packed_sequences_attend_within_themselves(how):
    # Padding-free batches: each sequence's logits as if it ran alone, by the 2x rule against
    # float64 runs of each sequence alone (attention across the boundary is far outside it).
    seqs, packed, pos, cu = packed_pair()
    extra = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=11, max_length_k=11) if how == "cu_seq_lens" else {}
    with torch.no_grad():
        truth = torch.cat([tiny_llama("sdpa", torch.float64)(input_ids=s).logits for s in seqs], dim=1)
        sdpa = torch.cat([tiny_llama("sdpa")(input_ids=s).logits for s in seqs], dim=1)
        ours = tiny_llama("tileattn")(input_ids=packed, position_ids=pos, **extra).logits
        crossed = tiny_llama("sdpa")(input_ids=packed).logits  # one sequence of 18: what packing must avoid
    err, err_sdpa, err_crossed = ((x.double() - truth).abs().max().item() for x in (ours, sdpa, crossed))
    assert err <= 2 * err_sdpa + 1e-5, (err, err_sdpa)
    assert err_crossed > 100 * (err + 1e-6), err_crossed  # the check would see attention across the boundary


def test_packed_batch_trains_as_its_sequences_do():
    # The gradient of the packed row's loss is the sum of its sequences' own (fp32, by the 2x rule).
    seqs, packed, pos, _ = packed_pair()
    def grads(attn, dtype, batches):
        model = tiny_llama(attn, dtype).train()
        for kw in batches:
            model(**kw, labels=kw["input_ids"]).loss.backward()  # each loss a mean over its own tokens
        return torch.cat([p.grad.flatten() for p in model.parameters()])
    alone = [dict(input_ids=s) for s in seqs]
    truth, sdpa = grads("sdpa", torch.float64, alone), grads("sdpa", torch.float32, alone)
    # One packed row: its loss averages over all tokens, so weight each sequence's like its own.
    model = tiny_llama("tileattn").train()
    logits = model(input_ids=packed, position_ids=pos).logits
    loss = 0
    for s, (a, b) in zip(seqs, ((0, 7), (7, 18))):
        loss = loss + torch.nn.functional.cross_entropy(logits[0, a:b - 1], s[0, 1:])
    loss.backward()
    ours = torch.cat([p.grad.flatten() for p in model.parameters()])
    err, err_sdpa = ((x.double() - truth).abs().max().item() for x in (ours, sdpa))
    assert err <= 2 * err_sdpa + 1e-6, (err, err_sdpa)
