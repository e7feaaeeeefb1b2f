"""A tiny transformers model (Llama: GQA, rotary, causal) with tileattn as its attention: over
20 optimizer steps its losses follow the float64 run as closely as the sdpa path's do
(|loss - loss_fp64| <= 2 |loss_sdpa - loss_fp64| + atol at every step); on a padded batch its
logits follow float64 by the same rule and it trains; greedy generation with left padding and
transformers' cache agrees with sdpa's tokens as often as eager does. CPU; skipped without torch
or transformers."""

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
